//! The rows of the layers above the interface (`--layers am,endpoints,rats,rpc`): what each
//! figure is, the seeds' own figures beside them, the goals of issues 10–13 and how a
//! run did, and their tables. The measurements are in `am.rs`, `flipc.rs`, `rats.rs` and `rpc.rs`.

use comfy_table::{presets, CellAlignment, Table};

use super::peers::{PeerKind, Peers};
use super::report::{size_name, Mode, Target};

/// A layer above the interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Layer {
    /// Active messages (hamlyn-am, seed 003 GRIM; issue 12).
    Am,
    /// FLIPC receive endpoints (seed 002; issue 11).
    Endpoints,
    /// The Rats protocols (hamlyn-rats, seed 001; issue 10).
    Rats,
    /// RPC over remote memory (hamlyn-rpc, seed 004 §3.1; issue 13).
    Rpc,
}

impl Layer {
    /// The name in the JSON report and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Layer::Am => "am",
            Layer::Endpoints => "endpoints",
            Layer::Rats => "rats",
            Layer::Rpc => "rpc",
        }
    }

    /// The heading of its table.
    fn heading(self) -> &'static str {
        match self {
            Layer::Am => {
                "Active messages (issue 12): an echo handler's round trip and the rate of \
                 short messages (four u64 arguments), bulk bandwidth, and seed 003 Figure 6 \
                 (the round trip as the sender's logical channels grow; each channel is a \
                 terminus of the sender's port, calls spread over them in turn). Server and \
                 client are two connections of their own to the engine(s), on two threads of \
                 this process. No direct path: active messages always go through an engine."
            }
            Layer::Endpoints => {
                "FLIPC endpoints (issue 11): medium messages into posted buffers, one-way \
                 (ping-pong between two endpoints / 2) and message rate (credit: the receiver \
                 returns buffers in batches, nothing is discarded); the priority figure and the \
                 token bucket through the engine. Two connections of their own to one engine, \
                 on threads of this process."
            }
            Layer::Rats => {
                "Rats (issue 10), mediated, one engine: two connections of their own, on two \
                 threads of this process; beside each, the same through the library alone."
            }
            Layer::Rpc => {
                "RPC (issue 13): seed 004 Table 4's columns as round trips — by argument \
                 bytes, Null 0 B, Simple 32 B (four integers in, one out), MW-32 256 B, \
                 MW-64 512 B, MW-128 1 KiB — a null call of a local function beside them, \
                 and null calls per second on one server thread with n outstanding (eRPC's \
                 metric). Server and client are threads of this process with connections of \
                 their own: on one engine (mediated: the paper's tuned local RPC) or on two \
                 joined over TCP (the cross-machine RPC)."
            }
        }
    }
}

/// What a layer row measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LayerOp {
    /// AM: a short message to an echo handler and its reply, a whole round trip.
    AmShortRtt,
    /// AM: short messages per second to a handler that does nothing.
    AmShortRate,
    /// AM: bulk messages to a handler that does nothing, bandwidth.
    AmBulkBandwidth,
    /// AM: the short round trip with calls spread over `count` logical channels.
    AmChannelsRtt,
    /// Endpoints: one-way latency (ping-pong / 2).
    EndpointOneWay,
    /// Endpoints: messages per second into one endpoint.
    EndpointRate,
    /// Endpoints: p99 one-way of a high-priority 64 B ping-pong, alone.
    PriorityAlone,
    /// Endpoints: the same while a low-priority stream saturates the engine.
    PriorityLoaded,
    /// Endpoints: messages per second of a terminus limited to `count` messages/s.
    TokenBucketMsgs,
    /// Endpoints: bytes per second (as GB/s) of a terminus limited to `count` bytes/s.
    TokenBucketBytes,
    /// Rats: tagged write, one way (ping-pong / 2).
    RatsTagged,
    /// The library alone: the same tagged-write ping-pong, one way.
    RawTagged,
    /// Rats: simple datagram answered through its reply seed, a whole round trip.
    RatsSimpleDatagram,
    /// Rats: request/response, a whole round trip.
    RatsRequestResponse,
    /// Rats: stream bandwidth, writes of `size`-byte records.
    RatsStreamRecords,
    /// Rats: stream bandwidth, `size`-byte writes as bytes.
    RatsStreamBytes,
    /// The library alone: send bandwidth of `size`-byte messages.
    RawBandwidth,
    /// RPC: a call's round trip with `size` bytes of arguments (Table 4's columns).
    RpcRoundTrip,
    /// A null call of a local function (the floor of Table 4).
    RpcLocalCall,
    /// RPC: null calls per second with `count` outstanding.
    RpcRate,
}

impl LayerOp {
    /// The name in the JSON report.
    pub fn name(self) -> &'static str {
        match self {
            LayerOp::AmShortRtt => "short_rtt",
            LayerOp::AmShortRate => "short_rate",
            LayerOp::AmBulkBandwidth => "bulk_bandwidth",
            LayerOp::AmChannelsRtt => "channels_rtt",
            LayerOp::EndpointOneWay => "one_way",
            LayerOp::EndpointRate => "msg_rate",
            LayerOp::PriorityAlone => "priority_alone",
            LayerOp::PriorityLoaded => "priority_loaded",
            LayerOp::TokenBucketMsgs => "token_bucket_msgs",
            LayerOp::TokenBucketBytes => "token_bucket_bytes",
            LayerOp::RatsTagged => "tagged_write",
            LayerOp::RawTagged => "raw_tagged_write",
            LayerOp::RatsSimpleDatagram => "simple_datagram_rtt",
            LayerOp::RatsRequestResponse => "request_response_rtt",
            LayerOp::RatsStreamRecords => "stream_records",
            LayerOp::RatsStreamBytes => "stream_bytes",
            LayerOp::RawBandwidth => "raw_bandwidth",
            LayerOp::RpcRoundTrip => "rpc_rtt",
            LayerOp::RpcLocalCall => "local_call",
            LayerOp::RpcRate => "rpc_rate",
        }
    }

    /// The name in the tables.
    fn label(self) -> &'static str {
        match self {
            LayerOp::AmShortRtt => "short, round trip",
            LayerOp::AmShortRate => "short, message rate",
            LayerOp::AmBulkBandwidth => "bulk, bandwidth",
            LayerOp::AmChannelsRtt => "short RTT, channels",
            LayerOp::EndpointOneWay => "one-way",
            LayerOp::EndpointRate => "message rate",
            LayerOp::PriorityAlone => "high prio, alone",
            LayerOp::PriorityLoaded => "high prio, low-prio flood",
            LayerOp::TokenBucketMsgs => "token bucket, msg/s",
            LayerOp::TokenBucketBytes => "token bucket, bytes/s",
            LayerOp::RatsTagged => "tagged write, one way",
            LayerOp::RawTagged => "library alone, one way",
            LayerOp::RatsSimpleDatagram => "simple datagram + reply seed, RTT",
            LayerOp::RatsRequestResponse => "request/response, RTT",
            LayerOp::RatsStreamRecords => "stream, records",
            LayerOp::RatsStreamBytes => "stream, bytes",
            LayerOp::RawBandwidth => "library alone, sends",
            LayerOp::RpcRoundTrip => "call, round trip",
            LayerOp::RpcLocalCall => "local null function call",
            LayerOp::RpcRate => "null calls, rate",
        }
    }
}

/// One figure of a layer (fields that do not apply are `None`).
#[derive(Clone, Debug, PartialEq)]
pub struct LayerRow {
    /// The layer.
    pub layer: Layer,
    /// The path.
    pub mode: Mode,
    /// What was measured.
    pub op: LayerOp,
    /// Message (or record, or argument) size in bytes.
    pub size: usize,
    /// Logical channels (`channels_rtt`), or the rate set (token bucket rows).
    pub count: Option<u64>,
    /// Median latency, µs.
    pub p50_us: Option<f64>,
    /// 99th-percentile latency, µs.
    pub p99_us: Option<f64>,
    /// Bandwidth, GB/s (10^9 bytes/s).
    pub gbps: Option<f64>,
    /// Messages per second.
    pub msgs_per_s: Option<f64>,
}

impl LayerRow {
    /// A row with no figure yet.
    pub fn new(layer: Layer, mode: Mode, op: LayerOp, size: usize) -> LayerRow {
        LayerRow {
            layer,
            mode,
            op,
            size,
            count: None,
            p50_us: None,
            p99_us: None,
            gbps: None,
            msgs_per_s: None,
        }
    }

    /// With latency percentiles.
    pub fn latency(mut self, p50_us: f64, p99_us: f64) -> LayerRow {
        self.p50_us = Some(p50_us);
        self.p99_us = Some(p99_us);
        self
    }

    /// With a message rate (and the bandwidth it makes at this size).
    pub fn rate(mut self, msgs_per_s: f64) -> LayerRow {
        self.msgs_per_s = Some(msgs_per_s);
        self.gbps = Some(msgs_per_s * self.size as f64 / 1e9);
        self
    }

    /// With a bandwidth only.
    pub fn bandwidth(mut self, gbps: f64) -> LayerRow {
        self.gbps = Some(gbps);
        self
    }

    /// With a count (channels, or the rate set).
    pub fn count(mut self, count: u64) -> LayerRow {
        self.count = Some(count);
        self
    }

    /// The seed's own figure this row is held beside, as text.
    pub fn reference(&self) -> Option<String> {
        match (self.layer, self.op) {
            (Layer::Am, LayerOp::AmShortRtt | LayerOp::AmChannelsRtt) => {
                Some("13 µs (seed 003, host to host, Myrinet 1999)".into())
            }
            (Layer::Am, LayerOp::AmBulkBandwidth) => {
                Some("106 MB/s (seed 003 peak, cut-through)".into())
            }
            (Layer::Endpoints, LayerOp::EndpointOneWay) => Some(format!(
                "{:.2} µs (FLIPC: 15.45 µs + 6.25 ns/B)",
                flipc_shape_us(self.size)
            )),
            _ => None,
        }
    }
}

/// FLIPC's one-way latency for `size`-byte messages (seed 002: 15.45 µs + 6.25 ns/B).
pub fn flipc_shape_us(size: usize) -> f64 {
    15.45 + 6.25e-3 * size as f64
}

/// The largest p50 over the smallest among `rows` (positive p50s only).
fn spread(rows: &[&LayerRow]) -> Option<f64> {
    let p50s = rows.iter().filter_map(|r| r.p50_us).filter(|&v| v > 0.0);
    let lo = p50s.clone().fold(f64::INFINITY, f64::min);
    let hi = p50s.fold(0.0, f64::max);
    (lo.is_finite() && hi > 0.0).then(|| hi / lo)
}

fn find(rows: &[LayerRow], mode: Mode, op: LayerOp, size: usize) -> Option<&LayerRow> {
    rows.iter()
        .find(|r| r.mode == mode && r.op == op && r.size == size)
}

/// The goals of issues 10–13 that these rows decide, each with this run's figure.
pub fn goals(rows: &[LayerRow]) -> Vec<Target> {
    let mut out = Vec::new();
    for mode in Mode::ALL {
        let channels: Vec<&LayerRow> = rows
            .iter()
            .filter(|r| r.mode == mode && r.op == LayerOp::AmChannelsRtt)
            .collect();
        if channels.len() > 1 {
            if let Some(s) = spread(&channels) {
                let most = channels.iter().filter_map(|r| r.count).max().unwrap_or(0);
                out.push(Target {
                    goal: format!(
                        "AM short round trip flat (within 10%) over 1 … {most} logical \
                         channels ({})",
                        mode.name()
                    ),
                    figure: format!("largest p50 ÷ smallest {s:.2}×"),
                    met: s <= 1.1,
                });
            }
        }
        let alone = find(rows, mode, LayerOp::PriorityAlone, 64).and_then(|r| r.p99_us);
        let loaded = find(rows, mode, LayerOp::PriorityLoaded, 64).and_then(|r| r.p99_us);
        if let (Some(a), Some(l)) = (alone, loaded) {
            let r = l / a;
            out.push(Target {
                goal: format!(
                    "endpoints: high-priority 64 B p99 under a low-priority flood ≤ 1.5× alone \
                     ({})",
                    mode.name()
                ),
                figure: format!("{r:.2}× ({} ÷ {})", us(l), us(a)),
                met: r <= 1.5,
            });
        }
        for op in [LayerOp::TokenBucketMsgs, LayerOp::TokenBucketBytes] {
            for r in rows.iter().filter(|r| r.mode == mode && r.op == op) {
                let (Some(set), achieved) = (r.count, r.achieved()) else {
                    continue;
                };
                let Some(got) = achieved else { continue };
                let err = got / set as f64 - 1.0;
                out.push(Target {
                    goal: format!(
                        "endpoints: token bucket within 5% of the set rate ({}, {} set)",
                        mode.name(),
                        r.rate_name(set as f64)
                    ),
                    figure: format!("{} achieved, {:+.1}%", r.rate_name(got), err * 100.0),
                    met: err.abs() <= 0.05,
                });
            }
        }
        let raw = find(rows, mode, LayerOp::RawBandwidth, 64 * 1024).and_then(|r| r.gbps);
        let records = find(rows, mode, LayerOp::RatsStreamRecords, 64 * 1024).and_then(|r| r.gbps);
        if let (Some(raw), Some(rec)) = (raw, records) {
            let r = rec / raw;
            out.push(Target {
                goal: format!(
                    "Rats stream, 64 KiB records ≥ 0.9× the raw send bandwidth ({})",
                    mode.name()
                ),
                figure: format!("{r:.2}× ({rec:.2} ÷ {raw:.2} GB/s)"),
                met: r >= 0.9,
            });
        }
    }
    // Seed 004's ratio: a cross-machine null RPC within 2× a tuned local one.
    let null = |mode| find(rows, mode, LayerOp::RpcRoundTrip, 0).and_then(|r| r.p50_us);
    if let (Some(local), Some(remote)) = (null(Mode::Mediated), null(Mode::Tcp)) {
        let r = remote / local;
        out.push(Target {
            goal: "RPC: cross-machine null round trip < 2× the local one (seed 004)".into(),
            figure: format!("{r:.2}× ({} ÷ {})", us(remote), us(local)),
            met: r < 2.0,
        });
    }
    out
}

impl LayerRow {
    /// The achieved rate of a token-bucket row in the unit of its limit (msgs/s or
    /// bytes/s).
    fn achieved(&self) -> Option<f64> {
        match self.op {
            LayerOp::TokenBucketMsgs => self.msgs_per_s,
            LayerOp::TokenBucketBytes => self.gbps.map(|g| g * 1e9),
            _ => None,
        }
    }

    fn rate_name(&self, v: f64) -> String {
        match self.op {
            LayerOp::TokenBucketBytes => format!("{:.2} MB/s", v / 1e6),
            _ => format!("{:.0} msg/s", v),
        }
    }
}

fn number(v: f64) -> String {
    if v < 0.1 {
        // A local call: a few nanoseconds.
        format!("{v:.4}")
    } else if v < 10.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.1}")
    }
}

fn us(v: f64) -> String {
    format!("{} µs", number(v))
}

/// The UCX figure a layer row is held beside: `am_lat` (p50, one way) for latencies at
/// the same size, `am_bw` for rates and bandwidths; shared memory on one node, TCP over
/// TCP. As text, with the peer's name.
fn ucx_beside(row: &LayerRow, peers: Option<&Peers>) -> Option<String> {
    let peers = peers?;
    let kind = if row.mode.is_tcp() {
        PeerKind::UcxTcp
    } else {
        PeerKind::UcxShm
    };
    let latency = row.p50_us.is_some();
    let test = if latency { "am_lat" } else { "am_bw" };
    let r = peers
        .results
        .iter()
        .find(|p| p.kind == kind && p.test == test && p.size == row.size)?;
    let text = if latency {
        // am_lat is one way; a round-trip row is held beside twice it.
        let rtt = matches!(
            row.op,
            LayerOp::AmShortRtt
                | LayerOp::AmChannelsRtt
                | LayerOp::RatsSimpleDatagram
                | LayerOp::RatsRequestResponse
        );
        let v = r.p50_us? * if rtt { 2.0 } else { 1.0 };
        format!("{}{}", us(v), if rtt { " (2× one way)" } else { "" })
    } else if row.msgs_per_s.is_some() && row.size <= 512 {
        format!("{:.2} M msg/s", r.msgs_per_s? / 1e6)
    } else {
        format!("{:.2} GB/s", r.gbps?)
    };
    Some(format!("{text} {} {test}", kind.name()))
}

/// The layers' tables, one per layer measured, with the seeds' figures and UCX beside.
pub fn render(rows: &[LayerRow], peers: Option<&Peers>) -> String {
    let mut out = String::new();
    for layer in [Layer::Am, Layer::Endpoints, Layer::Rats, Layer::Rpc] {
        let mine: Vec<&LayerRow> = rows.iter().filter(|r| r.layer == layer).collect();
        if mine.is_empty() {
            continue;
        }
        let mut t = Table::new();
        t.load_style(presets::ASCII_MARKDOWN);
        t.set_header(vec![
            "op",
            "size",
            "n",
            "mode",
            "p50",
            "p99",
            "rate",
            "bandwidth",
            "seed",
            "UCX",
        ]);
        let dash = || "-".to_string();
        for r in mine {
            t.add_row(vec![
                r.op.label().to_string(),
                size_name(r.size),
                r.count.map_or_else(dash, |c| c.to_string()),
                r.mode.name().to_string(),
                r.p50_us.map_or_else(dash, us),
                r.p99_us.map_or_else(dash, us),
                r.msgs_per_s
                    .map_or_else(dash, |m| format!("{:.3} M msg/s", m / 1e6)),
                r.gbps.map_or_else(dash, |g| format!("{:.1} MB/s", g * 1e3)),
                r.reference().unwrap_or_else(dash),
                ucx_beside(r, peers).unwrap_or_else(dash),
            ]);
        }
        for i in 1..8 {
            if let Some(c) = t.column_mut(i) {
                c.set_cell_alignment(CellAlignment::Right);
            }
        }
        out.push_str(&format!("\n{}\n\n{t}\n", layer.heading()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peers::PeerResult;

    fn am(op: LayerOp, channels: u64, p50: f64) -> LayerRow {
        LayerRow::new(Layer::Am, Mode::Mediated, op, 32)
            .latency(p50, p50 * 2.0)
            .count(channels)
    }

    #[test]
    fn goals_say_met_or_not() {
        let rows = vec![
            am(LayerOp::AmChannelsRtt, 1, 10.0),
            am(LayerOp::AmChannelsRtt, 64, 12.0),
            LayerRow::new(Layer::Endpoints, Mode::Mediated, LayerOp::PriorityAlone, 64)
                .latency(1.0, 4.0),
            LayerRow::new(
                Layer::Endpoints,
                Mode::Mediated,
                LayerOp::PriorityLoaded,
                64,
            )
            .latency(1.0, 5.0),
            LayerRow::new(
                Layer::Endpoints,
                Mode::Mediated,
                LayerOp::TokenBucketMsgs,
                64,
            )
            .rate(1030.0)
            .count(1000),
            LayerRow::new(Layer::Rats, Mode::Mediated, LayerOp::RawBandwidth, 65536).bandwidth(2.0),
            LayerRow::new(
                Layer::Rats,
                Mode::Mediated,
                LayerOp::RatsStreamRecords,
                65536,
            )
            .bandwidth(1.7),
        ];
        let g = goals(&rows);
        let met: Vec<bool> = g.iter().map(|t| t.met).collect();
        assert_eq!(met, [false, true, true, false], "{g:#?}");
        assert!(g[0].figure.contains("1.20×"), "{}", g[0].figure);
        assert!(g[2].figure.contains("+3.0%"), "{}", g[2].figure);
    }

    #[test]
    fn tables_show_the_seed_and_ucx_beside() {
        let rows = vec![
            LayerRow::new(Layer::Endpoints, Mode::Direct, LayerOp::EndpointOneWay, 128)
                .latency(0.5, 0.9),
            am(LayerOp::AmShortRtt, 1, 3.0),
        ];
        let peers = Peers {
            results: vec![PeerResult {
                kind: PeerKind::UcxShm,
                test: "am_lat",
                size: 32,
                actual_size: 32,
                p50_us: Some(0.25),
                p99_us: None,
                mean_us: None,
                gbps: None,
                msgs_per_s: None,
                detail: String::new(),
            }],
            ..Peers::default()
        };
        let text = render(&rows, Some(&peers));
        assert!(text.contains("16.25 µs (FLIPC"), "{text}");
        assert!(text.contains("13 µs (seed 003"), "{text}");
        assert!(
            text.contains("0.50 µs (2× one way) ucx-shm am_lat"),
            "{text}"
        );
        assert!((flipc_shape_us(512) - 18.65).abs() < 1e-9);
    }
}
