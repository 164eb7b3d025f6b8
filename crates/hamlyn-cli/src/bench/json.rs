//! The `--json FILE` report:
//!
//! ```text
//! {"floor": {"shm_pingpong_oneway_us": F, "shm_pingpong_oneway_us_runs": [F, F],
//!            "shm_relay_pingpong_oneway_us": F, "memcpy_gbps": {"4096": F, ...},
//!            "tcp_floor": {"pingpong_oneway_us": {"8": F, ...},
//!                          "pingpong_blocking_oneway_us": {"8": F, ...},
//!                          "pingpong_spinning_oneway_us": {"8": F, ...},
//!                          "stream_gbps": {"4096": F, ...},
//!                          "stream_blocking_gbps": {"4096": F, ...},
//!                          "stream_spinning_gbps": {"4096": F, ...},
//!                          "stream_msgs_per_s": {"8": F}}},
//!  "results": [{"mode": "direct" | "mediated" | "tcp",
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
//!  "targets": [{"goal": S, "figure": S, "met": B}, ...]}
//! ```
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

use super::plan::RATE_SIZE;
use super::report::{Report, Row};
use crate::json::{write_num, write_str};

/// The report as JSON text (one result per line, for people reading the file too).
pub fn to_json(r: &Report) -> String {
    let mut o = String::with_capacity(2048);
    o.push_str("{\"floor\": {\"shm_pingpong_oneway_us\": ");
    write_num(&mut o, Some(r.floor.shm_oneway_us));
    o.push_str(", \"shm_pingpong_oneway_us_runs\": [");
    for (i, v) in r.floor.shm_runs_us.iter().enumerate() {
        if i > 0 {
            o.push_str(", ");
        }
        write_num(&mut o, Some(*v));
    }
    o.push_str("], \"shm_relay_pingpong_oneway_us\": ");
    write_num(&mut o, Some(r.floor.shm_relay_oneway_us));
    o.push_str(", \"memcpy_gbps\": ");
    write_by_size(&mut o, &r.floor.memcpy_gbps);
    if let Some(tcp) = &r.floor.tcp {
        o.push_str(",\n           \"tcp_floor\": {\"pingpong_oneway_us\": ");
        let p50 = |v: &[(usize, f64, f64)]| -> Vec<(usize, f64)> {
            v.iter().map(|&(s, p, _)| (s, p)).collect()
        };
        write_by_size(&mut o, &p50(&tcp.pingpong_us));
        o.push_str(",\n                         \"pingpong_blocking_oneway_us\": ");
        write_by_size(&mut o, &p50(&tcp.blocking_us));
        o.push_str(",\n                         \"pingpong_spinning_oneway_us\": ");
        write_by_size(&mut o, &p50(&tcp.spinning_us));
        o.push_str(",\n                         \"stream_gbps\": ");
        write_by_size(&mut o, &tcp.stream_gbps);
        o.push_str(",\n                         \"stream_blocking_gbps\": ");
        write_by_size(&mut o, &tcp.stream_blocking_gbps);
        o.push_str(",\n                         \"stream_spinning_gbps\": ");
        write_by_size(&mut o, &tcp.stream_spinning_gbps);
        o.push_str(",\n                         \"stream_msgs_per_s\": ");
        let rate: Vec<(usize, f64)> = tcp
            .rate_msgs_per_s
            .map(|r| (RATE_SIZE, r))
            .into_iter()
            .collect();
        write_by_size(&mut o, &rate);
        o.push('}');
    }
    o.push_str("},\n \"results\": ");
    write_rows(&mut o, &r.rows);
    o.push_str(",\n \"loopback\": ");
    write_rows(&mut o, &r.loopback);
    o.push_str(",\n \"fairness\": ");
    write_list(&mut o, ", ", &r.fairness, |o, f| {
        o.push_str(&format!(
            "{{\"termini\": {}, \"size\": {}, \"per_terminus_gbps\": ",
            f.termini, f.size
        ));
        write_list(o, ", ", &f.per_terminus_gbps, |o, g| write_num(o, Some(*g)));
        write_fields(
            o,
            &[("total_gbps", Some(f.total_gbps)), ("jain", Some(f.jain))],
        );
        o.push_str(&format!(
            ", \"overflows\": {}, \"starved\": {:?}}}",
            f.overflows, f.starved
        ));
    });
    o.push_str(",\n \"scaling\": ");
    match &r.scaling {
        None => o.push_str("null"),
        Some(sc) => {
            o.push_str("{\"points\": ");
            write_list(&mut o, ",\n   ", &sc.points, |o, p| {
                o.push_str(&format!("{{\"ports\": {}, \"slots\": {}", p.ports, p.slots));
                write_fields(o, &[("p50_us", Some(p.p50_us)), ("p99_us", Some(p.p99_us))]);
                o.push('}');
            });
            o.push_str(", \"notes\": ");
            write_list(&mut o, ", ", &sc.notes, |o, n| write_str(o, n));
            o.push('}');
        }
    }
    o.push_str(",\n \"peers\": ");
    match &r.peers {
        None => o.push_str("null"),
        Some(p) => {
            o.push_str("{\"results\": ");
            write_list(&mut o, ",\n   ", &p.results, |o, x| {
                o.push_str("{\"peer\": ");
                write_str(o, x.kind.name());
                o.push_str(", \"test\": ");
                write_str(o, x.test);
                o.push_str(&format!(", \"size\": {}", x.size));
                write_fields(
                    o,
                    &[
                        ("p50_us", x.p50_us),
                        ("p99_us", x.p99_us),
                        ("gbps", x.gbps),
                        ("msgs_per_s", x.msgs_per_s),
                    ],
                );
                o.push('}');
            });
            o.push_str(",\n  \"missing\": ");
            write_list(&mut o, ", ", &p.missing, |o, m| write_str(o, m));
            o.push_str(",\n  \"ratios\": ");
            write_list(&mut o, ",\n   ", &r.peer_ratios(p), |o, x| {
                o.push_str("{\"mode\": ");
                write_str(o, x.mode.name());
                o.push_str(", \"op\": ");
                write_str(o, x.op.name());
                o.push_str(&format!(", \"size\": {}, \"peer\": ", x.size));
                write_str(o, &x.peer);
                write_fields(o, &[("hamlyn", Some(x.hamlyn)), ("theirs", Some(x.theirs))]);
                o.push_str(&format!(", \"ahead\": {}}}", x.ahead));
            });
            o.push('}');
        }
    }
    o.push_str(",\n \"targets\": ");
    write_list(&mut o, ",\n  ", &r.targets(), |o, t| {
        o.push_str("{\"goal\": ");
        write_str(o, &t.goal);
        o.push_str(", \"figure\": ");
        write_str(o, &t.figure);
        o.push_str(&format!(", \"met\": {}}}", t.met));
    });
    o.push_str("}\n");
    o
}

/// `[{"mode": ..., "op": ..., "size": N, "p50_us": F, ...}, ...]`, one row per line.
fn write_rows(o: &mut String, rows: &[Row]) {
    write_list(o, ",\n  ", rows, |o, row| {
        o.push_str("{\"mode\": ");
        write_str(o, row.mode.name());
        o.push_str(", \"op\": ");
        write_str(o, row.op.name());
        o.push_str(&format!(", \"size\": {}", row.size));
        write_fields(
            o,
            &[
                ("p50_us", row.p50_us),
                ("p99_us", row.p99_us),
                ("p999_us", row.p999_us),
                ("gbps", row.gbps),
                ("msgs_per_s", row.msgs_per_s),
            ],
        );
        o.push('}');
    });
}

/// `[A, B, ...]`: each item written by `each`, separated by `sep` (a separator with a
/// line break also starts the first item on a line of its own).
fn write_list<T>(o: &mut String, sep: &str, items: &[T], mut each: impl FnMut(&mut String, &T)) {
    o.push('[');
    let first = sep.trim_start_matches(',');
    for (i, item) in items.iter().enumerate() {
        o.push_str(if i > 0 {
            sep
        } else if first.starts_with('\n') {
            first
        } else {
            ""
        });
        each(o, item);
    }
    o.push(']');
}

/// `, "KEY": F` for each field (`null` when absent).
fn write_fields(o: &mut String, fields: &[(&str, Option<f64>)]) {
    for (key, v) in fields {
        o.push_str(", ");
        write_str(o, key);
        o.push_str(": ");
        write_num(o, *v);
    }
}

/// `{"SIZE": F, ...}`.
fn write_by_size(o: &mut String, values: &[(usize, f64)]) {
    o.push('{');
    for (i, (size, v)) in values.iter().enumerate() {
        if i > 0 {
            o.push_str(", ");
        }
        write_str(o, &size.to_string());
        o.push_str(": ");
        write_num(o, Some(*v));
    }
    o.push('}');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::fairness::Fairness;
    use crate::bench::latency::Latency;
    use crate::bench::report::{Floor, Mode, Op, Row, TcpFloor};
    use crate::bench::scaling::{Scaling, ScalingPoint};
    use crate::json::{parse, Value};

    #[test]
    fn report_json_parses_with_the_documented_keys() {
        let r = Report {
            setup: "test".into(),
            floor: Floor {
                shm_oneway_us: 0.13,
                shm_runs_us: vec![0.13, 0.2],
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
        };
        let v = parse(&to_json(&r)).unwrap();
        let top: Vec<&str> = v
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(
            top,
            ["floor", "results", "loopback", "fairness", "scaling", "peers", "targets"]
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
        };
        let v = parse(&to_json(&r)).unwrap();
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
        for row in v.get("results").unwrap().as_array().unwrap() {
            assert_eq!(row.get("mode").unwrap().as_str(), Some("tcp"));
        }
    }
}
