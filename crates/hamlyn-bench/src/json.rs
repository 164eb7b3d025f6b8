//! The `--json FILE` report:
//!
//! ```text
//! {"floor": {"shm_pingpong_oneway_us": F, "shm_pingpong_oneway_us_runs": [F, F(, F)],
//!            "waits_before_peers": N, "shm_relay_pingpong_oneway_us": F, "memcpy_gbps": {"4096": F, ...},
//!            "tcp_floor": {"pingpong_oneway_us": {"8": F, ...},
//!                          "pingpong_blocking_oneway_us": {"8": F, ...},
//!                          "pingpong_spinning_oneway_us": {"8": F, ...},
//!                          "stream_gbps": {"4096": F, ...},
//!                          "stream_blocking_gbps": {"4096": F, ...},
//!                          "stream_spinning_gbps": {"4096": F, ...},
//!                          "stream_msgs_per_s": {"8": F},
//!                          "pingpong_spinning_8b_after_us": F}},
//!  "results": [{"mode": "direct" | "mediated" | "tcp" | "tcp-plain",
//!               "op": "tagged_write" | "polled_write" | "datagram" | "read" | "fetch_add"
//!                     | "bandwidth" | "msg_rate",
//!               "size": N, "p50_us": F, "p99_us": F, "p999_us": F, "gbps": F,
//!               "msgs_per_s": F}, ...],
//!  "loopback": [ same shape ],
//!  "fairness": [{"termini": N, "size": N, "per_terminus_gbps": [F, ...], "total_gbps": F,
//!                "jain": F, "overflows": N, "starved": [N, ...]}, ...],
//!  "scaling": {"points": [{"ports": N, "slots": N, "p50_us": F, "p99_us": F}, ...],
//!              "notes": [S, ...]} | null,
//!  "peers": {"results": [{"peer": "ucx-shm" | "ucx-tcp" | "sockperf", "test": S, "size": N,
//!                         "p50_us": F, "p99_us": F, "gbps": F, "msgs_per_s": F}, ...],
//!            "missing": [S, ...],
//!            "ratios": [{"mode": S, "op": S, "size": N, "peer": S, "hamlyn": F,
//!                        "theirs": F, "ahead": B}, ...]} | null,
//!  "targets": [{"goal": S, "figure": S, "met": B}, ...],
//!  "layers": {"results": [{"layer": "am" | "endpoints" | "rats", "mode": S, "op": S,
//!                          "size": N, "count": N, "p50_us": F, "p99_us": F, "gbps": F,
//!                          "msgs_per_s": F, "reference": S}, ...],
//!             "ucx": {"results": [ as peers.results ], "missing": [S, ...]} | null},
//!  "placement": [{"phase": "direct" | "mediated", "this_process": [N, ...],
//!                 "peer": [N, ...]}, ...]}
//! ```
//!
//! `placement` lists the CPUs the two processes' measuring threads could run on while
//! each mode on the one engine was measured (one each with `--pin`).
//!
//! `layers` holds the rows of `--layers am,endpoints,rats` (empty without): `op` names
//! what was measured (`short_rtt`, `short_rate`, `bulk_bandwidth`, `channels_rtt` for
//! active messages; `one_way`, `msg_rate`, `priority_alone`, `priority_loaded`,
//! `token_bucket_msgs`, `token_bucket_bytes` for endpoints; `tagged_write`,
//! `raw_tagged_write`, `simple_datagram_rtt`, `request_response_rtt`, `stream_records`,
//! `stream_bytes`, `raw_bandwidth` for Rats); `count` is the number of logical channels
//! (`channels_rtt`) or the rate set (token bucket rows, in messages or bytes per second);
//! `reference` the seed's own figure the row is held beside. Their goals are in
//! `targets`. `ucx` is UCX's `am_lat` and `am_bw` at the layers' sizes (`--peers`).
//!
//! Latencies are one-way except `read` and `fetch_add`, which are whole round trips.
//!
//! Fields that do not apply to a result are `null`; `gbps` is 10^9 bytes per second. The
//! floor's ping-pong is the lower of the runs before the engine started and after it
//! stopped. `tcp_floor` (raw TCP between the two processes: ping-pong p50 one-way by
//! message size with blocking and with spinning reads, and the lower of the two as
//! `pingpong_oneway_us`; single-stream bandwidth by message size, blocking and spinning,
//! and the better of the two as `stream_gbps`; the message rate of a single stream of
//! 8-byte messages, the better of the two) is there with
//! the tcp mode only.
//!
//! The structs below are that layout, written by serde in the order of their fields;
//! the file is indented (`serde_json`'s pretty form) for people reading it too.

use serde::{Serialize, Serializer};

use super::fairness::Fairness;
use super::layers::LayerRow;
use super::peers::PeerResult;
use super::plan::RATE_SIZE;
use super::report::{PeerRatio, Report, Row, Target, TcpFloor};
use super::scaling::ScalingPoint;

/// The report as JSON text (ending with a line break).
pub fn to_json(r: &Report) -> serde_json::Result<String> {
    let mut text = serde_json::to_string_pretty(&ReportJson::new(r))?;
    text.push('\n');
    Ok(text)
}

/// The whole file.
#[derive(Serialize)]
struct ReportJson<'a> {
    floor: FloorJson<'a>,
    results: Vec<RowJson>,
    loopback: Vec<RowJson>,
    fairness: Vec<FairnessJson<'a>>,
    scaling: Option<ScalingJson<'a>>,
    peers: Option<PeersJson<'a>>,
    targets: Vec<TargetJson>,
    layers: LayersJson<'a>,
    placement: Vec<PlacementJson<'a>>,
}

/// An element of `placement`.
#[derive(Serialize)]
struct PlacementJson<'a> {
    phase: &'static str,
    this_process: &'a [usize],
    peer: &'a [usize],
}

/// `layers`.
#[derive(Serialize)]
struct LayersJson<'a> {
    results: Vec<LayerRowJson>,
    ucx: Option<UcxJson<'a>>,
}

/// `layers.ucx`.
#[derive(Serialize)]
struct UcxJson<'a> {
    results: Vec<PeerResultJson>,
    missing: &'a [String],
}

/// An element of `layers.results`.
#[derive(Serialize)]
struct LayerRowJson {
    layer: &'static str,
    mode: &'static str,
    op: &'static str,
    size: usize,
    count: Option<u64>,
    p50_us: Option<f64>,
    p99_us: Option<f64>,
    gbps: Option<f64>,
    msgs_per_s: Option<f64>,
    reference: Option<String>,
}

impl LayerRowJson {
    fn new(r: &LayerRow) -> LayerRowJson {
        LayerRowJson {
            layer: r.layer.name(),
            mode: r.mode.name(),
            op: r.op.name(),
            size: r.size,
            count: r.count,
            p50_us: r.p50_us,
            p99_us: r.p99_us,
            gbps: r.gbps,
            msgs_per_s: r.msgs_per_s,
            reference: r.reference(),
        }
    }
}

impl<'a> ReportJson<'a> {
    fn new(r: &'a Report) -> ReportJson<'a> {
        let f = &r.floor;
        ReportJson {
            floor: FloorJson {
                shm_pingpong_oneway_us: f.shm_oneway_us,
                shm_pingpong_oneway_us_runs: &f.shm_runs_us,
                waits_before_peers: f.waits_before_peers,
                shm_relay_pingpong_oneway_us: f.shm_relay_oneway_us,
                memcpy_gbps: BySize(f.memcpy_gbps.clone()),
                tcp_floor: f.tcp.as_ref().map(TcpFloorJson::new),
            },
            results: r.rows.iter().map(RowJson::new).collect(),
            loopback: r.loopback.iter().map(RowJson::new).collect(),
            fairness: r.fairness.iter().map(FairnessJson::new).collect(),
            scaling: r.scaling.as_ref().map(|s| ScalingJson {
                points: s.points.iter().map(PointJson::new).collect(),
                notes: &s.notes,
            }),
            peers: r.peers.as_ref().map(|p| PeersJson {
                results: p.results.iter().map(PeerResultJson::new).collect(),
                missing: &p.missing,
                ratios: r.peer_ratios(p).iter().map(RatioJson::new).collect(),
            }),
            targets: r.targets().into_iter().map(TargetJson::new).collect(),
            layers: LayersJson {
                results: r.layers.iter().map(LayerRowJson::new).collect(),
                ucx: r.layer_peers.as_ref().map(|p| UcxJson {
                    results: p.results.iter().map(PeerResultJson::new).collect(),
                    missing: &p.missing,
                }),
            },
            placement: r
                .placement
                .iter()
                .map(|p| PlacementJson {
                    phase: p.phase,
                    this_process: &p.this_process,
                    peer: &p.peer,
                })
                .collect(),
        }
    }
}

/// `floor`.
#[derive(Serialize)]
struct FloorJson<'a> {
    shm_pingpong_oneway_us: f64,
    shm_pingpong_oneway_us_runs: &'a [f64],
    waits_before_peers: u32,
    shm_relay_pingpong_oneway_us: f64,
    memcpy_gbps: BySize,
    #[serde(skip_serializing_if = "Option::is_none")]
    tcp_floor: Option<TcpFloorJson>,
}

/// `floor.tcp_floor`: p50s only, by message size.
#[derive(Serialize)]
struct TcpFloorJson {
    pingpong_oneway_us: BySize,
    pingpong_blocking_oneway_us: BySize,
    pingpong_spinning_oneway_us: BySize,
    stream_gbps: BySize,
    stream_blocking_gbps: BySize,
    stream_spinning_gbps: BySize,
    stream_msgs_per_s: BySize,
    /// The 8-byte spinning ping-pong again, after the engines' TCP modes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pingpong_spinning_8b_after_us: Option<f64>,
}

impl TcpFloorJson {
    fn new(t: &TcpFloor) -> TcpFloorJson {
        let p50 = |v: &[(usize, f64, f64)]| BySize(v.iter().map(|&(s, p, _)| (s, p)).collect());
        TcpFloorJson {
            pingpong_oneway_us: p50(&t.pingpong_us),
            pingpong_blocking_oneway_us: p50(&t.blocking_us),
            pingpong_spinning_oneway_us: p50(&t.spinning_us),
            stream_gbps: BySize(t.stream_gbps.clone()),
            stream_blocking_gbps: BySize(t.stream_blocking_gbps.clone()),
            stream_spinning_gbps: BySize(t.stream_spinning_gbps.clone()),
            stream_msgs_per_s: BySize(
                t.rate_msgs_per_s
                    .map(|r| (RATE_SIZE, r))
                    .into_iter()
                    .collect(),
            ),
            pingpong_spinning_8b_after_us: t.spinning_8b_after_us,
        }
    }
}

/// `{"SIZE": F, ...}` in the order measured.
struct BySize(Vec<(usize, f64)>);

impl Serialize for BySize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // A number as a map key is written as a string ("4096").
        s.collect_map(self.0.iter().map(|(size, v)| (size, v)))
    }
}

/// An element of `results` and `loopback`.
#[derive(Serialize)]
struct RowJson {
    mode: &'static str,
    op: &'static str,
    size: usize,
    p50_us: Option<f64>,
    p99_us: Option<f64>,
    p999_us: Option<f64>,
    gbps: Option<f64>,
    msgs_per_s: Option<f64>,
}

impl RowJson {
    fn new(row: &Row) -> RowJson {
        RowJson {
            mode: row.mode.name(),
            op: row.op.name(),
            size: row.size,
            p50_us: row.p50_us,
            p99_us: row.p99_us,
            p999_us: row.p999_us,
            gbps: row.gbps,
            msgs_per_s: row.msgs_per_s,
        }
    }
}

/// An element of `fairness`.
#[derive(Serialize)]
struct FairnessJson<'a> {
    termini: usize,
    size: usize,
    per_terminus_gbps: &'a [f64],
    total_gbps: f64,
    jain: f64,
    overflows: u64,
    starved: &'a [u64],
}

impl<'a> FairnessJson<'a> {
    fn new(f: &'a Fairness) -> FairnessJson<'a> {
        FairnessJson {
            termini: f.termini,
            size: f.size,
            per_terminus_gbps: &f.per_terminus_gbps,
            total_gbps: f.total_gbps,
            jain: f.jain,
            overflows: f.overflows,
            starved: &f.starved,
        }
    }
}

/// `scaling`.
#[derive(Serialize)]
struct ScalingJson<'a> {
    points: Vec<PointJson>,
    notes: &'a [String],
}

/// An element of `scaling.points`.
#[derive(Serialize)]
struct PointJson {
    ports: usize,
    slots: usize,
    p50_us: f64,
    p99_us: f64,
}

impl PointJson {
    fn new(p: &ScalingPoint) -> PointJson {
        PointJson {
            ports: p.ports,
            slots: p.slots,
            p50_us: p.p50_us,
            p99_us: p.p99_us,
        }
    }
}

/// `peers`.
#[derive(Serialize)]
struct PeersJson<'a> {
    results: Vec<PeerResultJson>,
    missing: &'a [String],
    ratios: Vec<RatioJson>,
}

/// An element of `peers.results`.
#[derive(Serialize)]
struct PeerResultJson {
    peer: &'static str,
    test: &'static str,
    size: usize,
    p50_us: Option<f64>,
    p99_us: Option<f64>,
    gbps: Option<f64>,
    msgs_per_s: Option<f64>,
}

impl PeerResultJson {
    fn new(x: &PeerResult) -> PeerResultJson {
        PeerResultJson {
            peer: x.kind.name(),
            test: x.test,
            size: x.size,
            p50_us: x.p50_us,
            p99_us: x.p99_us,
            gbps: x.gbps,
            msgs_per_s: x.msgs_per_s,
        }
    }
}

/// An element of `peers.ratios`.
#[derive(Serialize)]
struct RatioJson {
    mode: &'static str,
    op: &'static str,
    size: usize,
    peer: String,
    hamlyn: f64,
    theirs: f64,
    ahead: bool,
}

impl RatioJson {
    fn new(x: &PeerRatio) -> RatioJson {
        RatioJson {
            mode: x.mode.name(),
            op: x.op.name(),
            size: x.size,
            peer: x.peer.clone(),
            hamlyn: x.hamlyn,
            theirs: x.theirs,
            ahead: x.ahead,
        }
    }
}

/// An element of `targets`.
#[derive(Serialize)]
struct TargetJson {
    goal: String,
    figure: String,
    met: bool,
}

impl TargetJson {
    fn new(t: Target) -> TargetJson {
        TargetJson {
            goal: t.goal,
            figure: t.figure,
            met: t.met,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fairness::Fairness;
    use crate::latency::Latency;
    use crate::peers::{PeerKind, Peers};
    use crate::report::{Floor, Mode, Op, Row, TcpFloor};
    use crate::scaling::{Scaling, ScalingPoint};
    use serde_json::Value;

    fn parse(text: &str) -> serde_json::Result<Value> {
        serde_json::from_str(text)
    }

    #[test]
    fn report_json_parses_with_the_documented_keys() {
        let r = Report {
            setup: "test".into(),
            floor: Floor {
                shm_oneway_us: 0.13,
                shm_runs_us: vec![0.13, 0.2],
                waits_before_peers: 0,
                shm_relay_oneway_us: 4.5,
                memcpy_gbps: vec![(4096, 20.5), (1 << 20, 9.25)],
                tcp: None,
            },
            rows: vec![
                Row::latency(
                    Mode::Mediated,
                    Op::TaggedWrite,
                    8,
                    &Latency {
                        p50_us: 1.5,
                        p99_us: 3.0,
                        p999_us: 3.0,
                    },
                ),
                Row::bandwidth(Mode::Mediated, 1 << 20, 7.5),
                Row::rate(Mode::Mediated, 8, 2.0e6),
            ],
            loopback: vec![Row::latency(
                Mode::Mediated,
                Op::TaggedWrite,
                8,
                &Latency {
                    p50_us: 1.0,
                    p99_us: 2.0,
                    p999_us: 2.0,
                },
            )],
            fairness: vec![Fairness {
                termini: 2,
                size: 4096,
                per_terminus_gbps: vec![1.0, 3.0],
                total_gbps: 4.0,
                jain: 0.8,
                overflows: 0,
                starved: vec![0, 2],
            }],
            scaling: Some(Scaling {
                points: vec![ScalingPoint {
                    ports: 4,
                    slots: 0,
                    p50_us: 2.5,
                    p99_us: 3.0,
                }],
                notes: vec!["a \"quoted\" note".into()],
            }),
            peers: None,
            layers: Vec::new(),
            layer_peers: None,
            placement: Vec::new(),
        };
        let v = parse(&to_json(&r).unwrap()).unwrap();
        let top: Vec<&str> = v
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(
            top,
            [
                "floor",
                "results",
                "loopback",
                "fairness",
                "scaling",
                "peers",
                "targets",
                "layers",
                "placement"
            ]
        );
        let f = &v.get("fairness").unwrap().as_array().unwrap()[0];
        assert_eq!(f.get("jain").unwrap().as_f64(), Some(0.8));
        assert_eq!(
            f.get("per_terminus_gbps")
                .unwrap()
                .as_array()
                .unwrap()
                .len(),
            2
        );
        let sc = v.get("scaling").unwrap();
        let p = &sc.get("points").unwrap().as_array().unwrap()[0];
        assert_eq!(p.get("ports").unwrap().as_u64(), Some(4));
        assert_eq!(p.get("p50_us").unwrap().as_f64(), Some(2.5));
        assert_eq!(
            sc.get("notes").unwrap().as_array().unwrap()[0].as_str(),
            Some("a \"quoted\" note")
        );
        assert_eq!(v.get("peers"), Some(&Value::Null));
        let lb = v.get("loopback").unwrap().as_array().unwrap();
        assert_eq!(lb[0].get("p50_us").unwrap().as_f64(), Some(1.0));
        let floor = v.get("floor").unwrap();
        assert_eq!(
            floor.get("shm_pingpong_oneway_us").unwrap().as_f64(),
            Some(0.13)
        );
        assert_eq!(
            floor.get("shm_relay_pingpong_oneway_us").unwrap().as_f64(),
            Some(4.5)
        );
        let runs = floor.get("shm_pingpong_oneway_us_runs").unwrap();
        assert_eq!(runs.as_array().unwrap().len(), 2);
        let m = floor.get("memcpy_gbps").unwrap();
        assert_eq!(m.get("4096").unwrap().as_f64(), Some(20.5));
        assert_eq!(m.get("1048576").unwrap().as_f64(), Some(9.25));
        assert_eq!(
            floor.get("tcp_floor"),
            None,
            "measured with the tcp mode only"
        );
        let res = v.get("results").unwrap().as_array().unwrap();
        assert_eq!(res.len(), 3);
        for row in res {
            let keys: Vec<&str> = row
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, _)| k.as_str())
                .collect();
            assert_eq!(
                keys,
                [
                    "mode",
                    "op",
                    "size",
                    "p50_us",
                    "p99_us",
                    "p999_us",
                    "gbps",
                    "msgs_per_s"
                ]
            );
            assert_eq!(row.get("mode").unwrap().as_str(), Some("mediated"));
        }
        assert_eq!(res[0].get("op").unwrap().as_str(), Some("tagged_write"));
        assert_eq!(res[0].get("p99_us").unwrap().as_f64(), Some(3.0));
        assert_eq!(res[0].get("gbps"), Some(&Value::Null));
        assert_eq!(res[1].get("size").unwrap().as_u64(), Some(1 << 20));
        assert_eq!(res[1].get("gbps").unwrap().as_f64(), Some(7.5));
        assert_eq!(res[1].get("p50_us"), Some(&Value::Null));
        assert_eq!(res[2].get("msgs_per_s").unwrap().as_f64(), Some(2.0e6));
    }

    #[test]
    fn tcp_report_has_the_tcp_floor_and_tcp_rows() {
        let r = Report {
            setup: "test".into(),
            floor: Floor {
                shm_oneway_us: 0.13,
                shm_runs_us: vec![0.13],
                waits_before_peers: 0,
                shm_relay_oneway_us: 4.5,
                memcpy_gbps: vec![(4096, 20.5)],
                tcp: Some(TcpFloor {
                    pingpong_us: vec![(8, 4.25, 9.0), (64, 4.5, 9.5)],
                    blocking_us: vec![(8, 20.0, 30.0), (64, 4.5, 9.5)],
                    spinning_us: vec![(8, 4.25, 9.0), (64, 5.0, 9.5)],
                    stream_gbps: vec![(1 << 20, 3.5)],
                    stream_blocking_gbps: vec![(1 << 20, 3.5)],
                    stream_spinning_gbps: vec![(1 << 20, 3.0)],
                    rate_msgs_per_s: Some(2.5e5),
                    spinning_8b_after_us: Some(4.5),
                }),
            },
            rows: vec![
                Row::latency(
                    Mode::Tcp,
                    Op::TaggedWrite,
                    8,
                    &Latency {
                        p50_us: 5.0,
                        p99_us: 7.0,
                        p999_us: 7.0,
                    },
                ),
                Row::bandwidth(Mode::Tcp, 1 << 20, 4.0),
            ],
            loopback: vec![],
            fairness: vec![],
            scaling: None,
            peers: None,
            layers: Vec::new(),
            layer_peers: None,
            placement: Vec::new(),
        };
        let v = parse(&to_json(&r).unwrap()).unwrap();
        let floor = v.get("floor").unwrap();
        let keys: Vec<&str> = floor
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(
            keys,
            [
                "shm_pingpong_oneway_us",
                "shm_pingpong_oneway_us_runs",
                "waits_before_peers",
                "shm_relay_pingpong_oneway_us",
                "memcpy_gbps",
                "tcp_floor"
            ]
        );
        let tcp = floor.get("tcp_floor").unwrap();
        let pp = tcp.get("pingpong_oneway_us").unwrap();
        assert_eq!(pp.get("8").unwrap().as_f64(), Some(4.25));
        assert_eq!(pp.get("64").unwrap().as_f64(), Some(4.5));
        let b = tcp.get("pingpong_blocking_oneway_us").unwrap();
        assert_eq!(b.get("8").unwrap().as_f64(), Some(20.0));
        let sp = tcp.get("pingpong_spinning_oneway_us").unwrap();
        assert_eq!(sp.get("64").unwrap().as_f64(), Some(5.0));
        let st = tcp.get("stream_gbps").unwrap();
        assert_eq!(st.get("1048576").unwrap().as_f64(), Some(3.5));
        let sb = tcp.get("stream_spinning_gbps").unwrap();
        assert_eq!(sb.get("1048576").unwrap().as_f64(), Some(3.0));
        let rate = tcp.get("stream_msgs_per_s").unwrap();
        assert_eq!(rate.get("8").unwrap().as_f64(), Some(2.5e5));
        let after = tcp.get("pingpong_spinning_8b_after_us").unwrap();
        assert_eq!(after.as_f64(), Some(4.5));
        for row in v.get("results").unwrap().as_array().unwrap() {
            assert_eq!(row.get("mode").unwrap().as_str(), Some("tcp"));
        }
    }

    #[test]
    fn peers_report_their_results_missing_tests_and_ratios() {
        let result = |kind, test, p50_us, gbps| PeerResult {
            kind,
            test,
            size: 8,
            actual_size: 8,
            p50_us,
            p99_us: None,
            mean_us: None,
            gbps,
            msgs_per_s: None,
            detail: String::new(),
        };
        let r = Report {
            setup: "test".into(),
            floor: Floor {
                shm_oneway_us: 0.2,
                shm_runs_us: vec![0.2],
                waits_before_peers: 0,
                shm_relay_oneway_us: 0.25,
                memcpy_gbps: vec![],
                tcp: None,
            },
            rows: vec![Row::latency(
                Mode::Direct,
                Op::TaggedWrite,
                8,
                &Latency {
                    p50_us: 0.25,
                    p99_us: 0.5,
                    p999_us: 0.5,
                },
            )],
            loopback: vec![],
            fairness: vec![],
            scaling: None,
            peers: Some(Peers {
                results: vec![
                    result(PeerKind::UcxShm, "tag_lat", Some(0.3), None),
                    result(PeerKind::Sockperf, "throughput", None, Some(f64::NAN)),
                ],
                missing: vec!["ucx-tcp: not installed".into()],
                notes: vec![],
            }),
            layers: Vec::new(),
            layer_peers: None,
            placement: Vec::new(),
        };
        let v = parse(&to_json(&r).unwrap()).unwrap();
        let p = v.get("peers").unwrap();
        let keys: Vec<&str> = p
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(keys, ["results", "missing", "ratios"]);
        let res = p.get("results").unwrap().as_array().unwrap();
        let keys: Vec<&str> = res[0]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(
            keys,
            [
                "peer",
                "test",
                "size",
                "p50_us",
                "p99_us",
                "gbps",
                "msgs_per_s"
            ]
        );
        assert_eq!(res[0].get("peer").unwrap().as_str(), Some("ucx-shm"));
        assert_eq!(res[0].get("p50_us").unwrap().as_f64(), Some(0.3));
        assert_eq!(
            res[1].get("gbps"),
            Some(&Value::Null),
            "NaN is written null"
        );
        assert_eq!(
            p.get("missing").unwrap().as_array().unwrap()[0].as_str(),
            Some("ucx-tcp: not installed")
        );
        let ratio = &p.get("ratios").unwrap().as_array().unwrap()[0];
        let keys: Vec<&str> = ratio
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(
            keys,
            ["mode", "op", "size", "peer", "hamlyn", "theirs", "ahead"]
        );
        assert_eq!(ratio.get("peer").unwrap().as_str(), Some("ucx-shm tag_lat"));
        assert_eq!(ratio.get("ahead"), Some(&Value::Bool(true)));
        assert!(v
            .get("targets")
            .unwrap()
            .as_array()
            .unwrap()
            .iter()
            .all(|t| {
                t.get("goal").is_some_and(Value::is_string)
                    && t.get("met").is_some_and(Value::is_boolean)
            }));
    }

    #[test]
    fn layer_rows_carry_their_layer_reference_and_goals() {
        use crate::layers::{Layer, LayerOp, LayerRow};
        let r = Report {
            setup: "test".into(),
            floor: Floor {
                shm_oneway_us: 0.13,
                shm_runs_us: vec![0.13],
                waits_before_peers: 0,
                shm_relay_oneway_us: 4.5,
                memcpy_gbps: vec![],
                tcp: None,
            },
            rows: vec![],
            loopback: vec![],
            fairness: vec![],
            scaling: None,
            peers: None,
            layers: vec![
                LayerRow::new(Layer::Endpoints, Mode::Direct, LayerOp::EndpointOneWay, 64)
                    .latency(0.4, 0.9),
                LayerRow::new(
                    Layer::Endpoints,
                    Mode::Mediated,
                    LayerOp::TokenBucketMsgs,
                    512,
                )
                .rate(990.0)
                .count(1000),
            ],
            layer_peers: Some(Peers {
                results: vec![],
                missing: vec!["ucx_perftest not installed".into()],
                notes: vec![],
            }),
            placement: Vec::new(),
        };
        let v = parse(&to_json(&r).unwrap()).unwrap();
        let layers = v.get("layers").unwrap();
        let rows = layers.get("results").and_then(Value::as_array).unwrap();
        let keys: Vec<&str> = rows[0]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(
            keys,
            [
                "layer",
                "mode",
                "op",
                "size",
                "count",
                "p50_us",
                "p99_us",
                "gbps",
                "msgs_per_s",
                "reference"
            ]
        );
        assert_eq!(
            rows[0].get("layer").and_then(Value::as_str),
            Some("endpoints")
        );
        assert_eq!(rows[0].get("op").and_then(Value::as_str), Some("one_way"));
        assert!(rows[0]
            .get("reference")
            .and_then(Value::as_str)
            .unwrap()
            .contains("FLIPC"));
        assert_eq!(rows[1].get("count").and_then(Value::as_u64), Some(1000));
        assert_eq!(
            layers
                .get("ucx")
                .and_then(|u| u.get("missing"))
                .and_then(Value::as_array)
                .map(Vec::len),
            Some(1)
        );
        let goals = v.get("targets").and_then(Value::as_array).unwrap();
        assert_eq!(goals.len(), 1, "the token bucket's goal: {goals:?}");
        assert_eq!(goals[0].get("met"), Some(&Value::Bool(true)));
    }
}
