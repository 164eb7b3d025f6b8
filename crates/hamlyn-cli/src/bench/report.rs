//! The benchmark's results and their table.

use comfy_table::{presets, CellAlignment, Table};

use super::plan::BANDWIDTH_SIZES;

/// The floor measured in the same run.
#[derive(Clone, Debug, PartialEq)]
pub struct Floor {
    /// Shared-memory cache-line ping-pong between two processes, one-way, µs: the lower
    /// of [`Floor::shm_runs_us`].
    pub shm_oneway_us: f64,
    /// The ping-pong measured before the engine started and after it stopped (where the
    /// hypervisor places the two vCPUs can change during a run).
    pub shm_runs_us: Vec<f64>,
    /// The same ping-pong through a relay thread standing in for the engine, every party
    /// waiting as Hamlyn's do (spin, then sleep until woken), one-way, µs.
    pub shm_relay_oneway_us: f64,
    /// Single-threaded memcpy bandwidth by size, GB/s.
    pub memcpy_gbps: Vec<(usize, f64)>,
    /// Raw TCP between the two processes (measured with `--fabric tcp` only).
    pub tcp: Option<TcpFloor>,
}

/// The floor of the TCP mode: raw TCP over loopback between the two processes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TcpFloor {
    /// Ping-pong one-way latency by size: (size, p50 µs, p99 µs), the better (lower p50)
    /// of the blocking and the spinning ping-pong.
    pub pingpong_us: Vec<(usize, f64, f64)>,
    /// The ping-pong with blocking reads.
    pub blocking_us: Vec<(usize, f64, f64)>,
    /// The ping-pong with spinning non-blocking reads.
    pub spinning_us: Vec<(usize, f64, f64)>,
    /// Single-stream bandwidth by message size, GB/s: the better of the blocking and the
    /// spinning stream.
    pub stream_gbps: Vec<(usize, f64)>,
    /// The stream with blocking reads and writes.
    pub stream_blocking_gbps: Vec<(usize, f64)>,
    /// The stream with spinning non-blocking reads and writes.
    pub stream_spinning_gbps: Vec<(usize, f64)>,
    /// Messages per second of a single stream of 8-byte messages (one write each), the
    /// better of blocking and spinning.
    pub rate_msgs_per_s: Option<f64>,
}

impl TcpFloor {
    /// Ping-pong (p50, p99) one-way µs for `size`.
    pub fn pingpong(&self, size: usize) -> Option<(f64, f64)> {
        self.pingpong_us
            .iter()
            .find(|(s, ..)| *s == size)
            .map(|&(_, p50, p99)| (p50, p99))
    }

    /// Stream bandwidth for `size`.
    pub fn stream(&self, size: usize) -> Option<f64> {
        self.stream_gbps
            .iter()
            .find(|(s, _)| *s == size)
            .map(|(_, g)| *g)
    }
}

impl Floor {
    /// memcpy bandwidth for `size`.
    pub fn memcpy(&self, size: usize) -> Option<f64> {
        self.memcpy_gbps
            .iter()
            .find(|(s, _)| *s == size)
            .map(|(_, g)| *g)
    }
}

/// Which path the figures were measured on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Two processes on one engine: every byte goes through it.
    Mediated,
    /// Two processes on two engines joined by the TCP fabric over loopback.
    Tcp,
}

impl Mode {
    /// The name used in the JSON report.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Mediated => "mediated",
            Mode::Tcp => "tcp",
        }
    }
}

/// What a result row measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// One-way latency of a tagged write with notification (ping-pong RTT / 2).
    TaggedWrite,
    /// Streaming bandwidth.
    Bandwidth,
    /// Streaming message rate.
    MsgRate,
}

impl Op {
    /// The name used in the JSON report.
    pub fn name(self) -> &'static str {
        match self {
            Op::TaggedWrite => "tagged_write",
            Op::Bandwidth => "bandwidth",
            Op::MsgRate => "msg_rate",
        }
    }
}

/// One measured figure (fields that do not apply are `None`).
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// What was measured.
    pub op: Op,
    /// Message size in bytes.
    pub size: usize,
    /// Median one-way latency, µs.
    pub p50_us: Option<f64>,
    /// 99th-percentile one-way latency, µs.
    pub p99_us: Option<f64>,
    /// Bandwidth, GB/s (10^9 bytes/s).
    pub gbps: Option<f64>,
    /// Messages per second.
    pub msgs_per_s: Option<f64>,
}

impl Row {
    /// A latency row.
    pub fn latency(size: usize, p50_us: f64, p99_us: f64) -> Row {
        Row {
            op: Op::TaggedWrite,
            size,
            p50_us: Some(p50_us),
            p99_us: Some(p99_us),
            gbps: None,
            msgs_per_s: None,
        }
    }

    /// A bandwidth row.
    pub fn bandwidth(size: usize, gbps: f64) -> Row {
        Row {
            op: Op::Bandwidth,
            size,
            p50_us: None,
            p99_us: None,
            gbps: Some(gbps),
            msgs_per_s: None,
        }
    }

    /// A message-rate row.
    pub fn rate(size: usize, msgs_per_s: f64) -> Row {
        Row {
            op: Op::MsgRate,
            size,
            p50_us: None,
            p99_us: None,
            gbps: None,
            msgs_per_s: Some(msgs_per_s),
        }
    }
}

/// A whole run.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// How it was run (for the heading).
    pub setup: String,
    /// The path measured.
    pub mode: Mode,
    /// The floor.
    pub floor: Floor,
    /// The Hamlyn figures (through the engine, or the two engines).
    pub rows: Vec<Row>,
    /// One-way latency of messages a process sends to itself (one hop through the engine,
    /// two busy threads): shown in the table, not part of the JSON report.
    pub loopback: Vec<Row>,
}

/// `8 B`, `4 KiB`, `1 MiB`.
pub fn size_name(size: usize) -> String {
    match size {
        s if s >= 1 << 20 && s % (1 << 20) == 0 => format!("{} MiB", s >> 20),
        s if s >= 1 << 10 && s % (1 << 10) == 0 => format!("{} KiB", s >> 10),
        s => format!("{s} B"),
    }
}

fn us(v: f64) -> String {
    format!("{} µs", number(v))
}

/// Two decimals below 10, one above.
fn number(v: f64) -> String {
    if v < 10.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.1}")
    }
}

fn msg_rate(v: f64) -> String {
    format!("{:.2} M msg/s", v / 1e6)
}

fn ratio(v: f64) -> String {
    format!("{v:.2}×")
}

fn align_right(t: &mut Table, columns: usize) {
    for i in 1..columns {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
}

impl Report {
    /// The results as a table (Markdown-compatible), with a heading.
    pub fn render(&self) -> String {
        match (self.mode, &self.floor.tcp) {
            (Mode::Tcp, Some(tcp)) => self.render_tcp(tcp),
            _ => self.render_mediated(),
        }
    }

    /// The TCP mode's table: each figure against raw TCP of the same size.
    fn render_tcp(&self, tcp: &TcpFloor) -> String {
        let f = &self.floor;
        let mut t = Table::new();
        t.load_style(presets::ASCII_MARKDOWN);
        t.set_header(vec![
            "figure",
            "size",
            "Hamlyn (p50)",
            "Hamlyn p99",
            "raw TCP (p50)",
            "raw TCP p99",
            "Hamlyn ÷ raw TCP",
        ]);
        let dash = || "-".to_string();
        for r in &self.rows {
            let size = size_name(r.size);
            let row = match r.op {
                Op::TaggedWrite => {
                    let p50 = r.p50_us.unwrap_or(f64::NAN);
                    let raw = tcp.pingpong(r.size);
                    vec![
                        "one-way latency".into(),
                        size,
                        us(p50),
                        r.p99_us.map_or_else(dash, us),
                        raw.map_or_else(dash, |(p, _)| us(p)),
                        raw.map_or_else(dash, |(_, p)| us(p)),
                        raw.map_or_else(dash, |(p, _)| ratio(p50 / p)),
                    ]
                }
                Op::Bandwidth => {
                    let g = r.gbps.unwrap_or(f64::NAN);
                    let raw = tcp.stream(r.size);
                    vec![
                        "bandwidth".into(),
                        size,
                        format!("{g:.2} GB/s"),
                        dash(),
                        raw.map_or_else(dash, |m| format!("{m:.2} GB/s")),
                        dash(),
                        raw.map_or_else(dash, |m| ratio(g / m)),
                    ]
                }
                Op::MsgRate => {
                    let m = r.msgs_per_s.unwrap_or(f64::NAN);
                    let raw = tcp.rate_msgs_per_s;
                    vec![
                        "message rate".into(),
                        size,
                        msg_rate(m),
                        dash(),
                        raw.map_or_else(dash, msg_rate),
                        dash(),
                        raw.map_or_else(dash, |raw| ratio(m / raw)),
                    ]
                }
            };
            t.add_row(row);
        }
        align_right(&mut t, 7);
        let us_by_size = |v: &[(usize, f64, f64)]| {
            v.iter()
                .map(|&(s, p50, _)| format!("{} {}", size_name(s), number(p50)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let gbps_by_size = |v: &[(usize, f64)]| {
            v.iter()
                .map(|&(s, g)| format!("{} {g:.2}", size_name(s)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "hamlyn bench: {}\nfloor: raw TCP loopback between the two processes (TCP_NODELAY), \
             measured before the engines started; the raw TCP columns hold the better of \
             blocking and spinning calls\n  ping-pong one-way p50 µs, blocking: {}; \
             spinning: {}\n  single stream GB/s, blocking: {}; spinning: {}\n  \
             shared-memory ping-pong one-way {}\n\n{t}\n",
            self.setup,
            us_by_size(&tcp.blocking_us),
            us_by_size(&tcp.spinning_us),
            gbps_by_size(&tcp.stream_blocking_gbps),
            gbps_by_size(&tcp.stream_spinning_gbps),
            us(f.shm_oneway_us),
        )
    }

    /// The mediated mode's table: each figure against the shared-memory floor.
    fn render_mediated(&self) -> String {
        let f = &self.floor;
        let mut t = Table::new();
        t.load_style(presets::ASCII_MARKDOWN);
        t.set_header(vec![
            "figure",
            "size",
            "Hamlyn (p50)",
            "Hamlyn p99",
            "floor",
            "Hamlyn ÷ floor",
            "÷ relay floor",
        ]);
        let loopback = self.loopback.iter().map(|r| (r, true));
        let mut rows: Vec<(&Row, bool)> = self.rows.iter().map(|r| (r, false)).collect();
        let after_latency = rows
            .iter()
            .rposition(|(r, _)| r.op == Op::TaggedWrite)
            .map_or(0, |i| i + 1);
        rows.splice(after_latency..after_latency, loopback);
        for (r, is_loopback) in rows {
            let size = size_name(r.size);
            let dash = || "-".to_string();
            let row = match r.op {
                Op::TaggedWrite => {
                    let p50 = r.p50_us.unwrap_or(f64::NAN);
                    vec![
                        if is_loopback {
                            "one-way, to itself".into()
                        } else {
                            "one-way latency".into()
                        },
                        size,
                        us(p50),
                        r.p99_us.map_or_else(dash, us),
                        us(f.shm_oneway_us),
                        ratio(p50 / f.shm_oneway_us),
                        // The relay floor has three parties; a process sending to
                        // itself is two, so only the direct floor compares.
                        if is_loopback {
                            dash()
                        } else {
                            ratio(p50 / f.shm_relay_oneway_us)
                        },
                    ]
                }
                Op::Bandwidth => {
                    let g = r.gbps.unwrap_or(f64::NAN);
                    let m = f.memcpy(r.size);
                    vec![
                        "bandwidth".into(),
                        size,
                        format!("{g:.2} GB/s"),
                        dash(),
                        m.map_or_else(dash, |m| format!("{m:.2} GB/s memcpy")),
                        m.map_or_else(dash, |m| ratio(g / m)),
                        dash(),
                    ]
                }
                Op::MsgRate => vec![
                    "message rate".into(),
                    size,
                    format!("{:.2} M msg/s", r.msgs_per_s.unwrap_or(f64::NAN) / 1e6),
                    dash(),
                    dash(),
                    dash(),
                    dash(),
                ],
            };
            t.add_row(row);
        }
        align_right(&mut t, 7);
        let memcpy: Vec<String> = BANDWIDTH_SIZES
            .iter()
            .filter_map(|&s| f.memcpy(s).map(|g| format!("{} {g:.2}", size_name(s))))
            .collect();
        let runs: Vec<String> = f.shm_runs_us.iter().map(|&v| us(v)).collect();
        format!(
            "hamlyn bench: {}\nfloor: shared-memory ping-pong one-way {} (before, after: {}); \
             through a relay thread {}; memcpy GB/s: {}\n\n{t}\n",
            self.setup,
            us(f.shm_oneway_us),
            runs.join(", "),
            us(f.shm_relay_oneway_us),
            memcpy.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_shows_figures_and_ratios() {
        let r = Report {
            setup: "test".into(),
            mode: Mode::Mediated,
            floor: Floor {
                shm_oneway_us: 0.2,
                shm_runs_us: vec![0.2, 0.3],
                shm_relay_oneway_us: 0.25,
                memcpy_gbps: vec![(4096, 10.0)],
                tcp: None,
            },
            rows: vec![
                Row::latency(8, 0.5, 1.25),
                Row::bandwidth(4096, 5.0),
                Row::rate(8, 2.5e6),
            ],
            loopback: vec![Row::latency(8, 0.4, 0.8)],
        };
        let out = r.render();
        for want in [
            "0.50 µs",
            "1.25 µs",
            "2.50×",
            "5.00 GB/s",
            "10.00 GB/s memcpy",
            "0.50×",
            "2.50 M msg/s",
            "4 KiB",
            "8 B",
        ] {
            assert!(out.contains(want), "{want:?} missing from\n{out}");
        }
        assert_eq!(size_name(4 << 20), "4 MiB");
        assert_eq!(size_name(65536), "64 KiB");
        assert_eq!(size_name(100), "100 B");
    }

    #[test]
    fn tcp_table_compares_with_raw_tcp() {
        let r = Report {
            setup: "tcp test".into(),
            mode: Mode::Tcp,
            floor: Floor {
                shm_oneway_us: 0.2,
                shm_runs_us: vec![0.2],
                shm_relay_oneway_us: 0.25,
                memcpy_gbps: vec![(4096, 10.0)],
                tcp: Some(TcpFloor {
                    pingpong_us: vec![(8, 4.0, 8.0)],
                    blocking_us: vec![(8, 30.0, 60.0)],
                    spinning_us: vec![(8, 4.0, 8.0)],
                    stream_gbps: vec![(1 << 20, 2.0)],
                    stream_blocking_gbps: vec![(1 << 20, 1.5)],
                    stream_spinning_gbps: vec![(1 << 20, 2.0)],
                    rate_msgs_per_s: Some(1e6),
                }),
            },
            rows: vec![
                Row::latency(8, 5.0, 9.0),
                Row::bandwidth(1 << 20, 3.0),
                Row::bandwidth(4096, 1.0),
                Row::rate(8, 2.5e5),
            ],
            loopback: vec![],
        };
        let out = r.render();
        for want in [
            "raw TCP (p50)",
            "Hamlyn ÷ raw TCP",
            "4.00 µs",
            "8.00 µs",
            "1.25×",
            "2.00 GB/s",
            "1.50×",
            "0.25 M msg/s",
            "1.00 M msg/s",
            "0.25×",
            "blocking: 8 B 30.0",
            "spinning: 8 B 4.00",
            "blocking: 1 MiB 1.50",
        ] {
            assert!(out.contains(want), "{want:?} missing from\n{out}");
        }
    }
}
