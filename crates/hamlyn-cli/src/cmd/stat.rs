//! `hamlyn stat`: a running engine's statistics ([`hamlyn_wire::stats::Stats`]), as tables
//! or as JSON (`--json`: the serde form of the same struct).

use std::fmt::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use comfy_table::{presets, CellAlignment, Table};
use hamlyn_wire::stats::{Counts, FabricStats, Stats};

use crate::control::{fetch_stats, ControlError};
use crate::socket::{DEFAULT_SOCKET, SOCKET_ENV};

/// `hamlyn stat` arguments.
#[derive(Debug, Args)]
pub struct StatArgs {
    /// The engine's control socket.
    #[arg(long, value_name = "PATH", env = SOCKET_ENV, default_value = DEFAULT_SOCKET)]
    pub socket: PathBuf,
    /// Print the statistics as JSON (every field of every part, one object).
    #[arg(long)]
    pub json: bool,
    /// Longest wait for each of the engine's answers, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 5000)]
    pub timeout_ms: u64,
}

/// Why `hamlyn stat` failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StatError {
    /// The engine could not be asked.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// The statistics could not be written as JSON.
    #[error("writing the statistics as JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// Standard output could not be written.
    #[error("writing the statistics: {0}")]
    Output(#[from] std::io::Error),
}

/// Fetches and prints the statistics.
pub fn run(args: StatArgs) -> Result<(), StatError> {
    let stats = fetch_stats(&args.socket, Duration::from_millis(args.timeout_ms.max(1)))?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if args.json {
        serde_json::to_writer(&mut out, &stats)?;
        std::io::Write::write_all(&mut out, b"\n")?;
    } else {
        std::io::Write::write_all(&mut out, render(&stats).as_bytes())?;
        let timeout = Duration::from_millis(args.timeout_ms.max(1));
        let am = super::am_stat::render(&args.socket, timeout, stats.node);
        std::io::Write::write_all(&mut out, am.as_bytes())?;
    }
    std::io::Write::flush(&mut out)?;
    Ok(())
}

fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_style(presets::ASCII_MARKDOWN);
    t.set_header(header.to_vec());
    t
}

/// Right-aligns every column from `first` on (the numeric ones).
fn align_numbers(t: &mut Table, first: usize) {
    for c in t.column_iter_mut().skip(first) {
        c.set_cell_alignment(CellAlignment::Right);
    }
}

/// `name=n, ...` for named counts (`-` when empty).
fn counts(c: &Counts) -> String {
    if c.is_empty() {
        return "-".into();
    }
    c.iter()
        .map(|(k, n)| format!("{k}={n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A table of named counters (`-` rows for none).
fn counter_table(rows: &[(&str, u64)]) -> Table {
    let mut t = table(&["counter", "value"]);
    for (label, v) in rows {
        t.add_row(vec![(*label).to_string(), v.to_string()]);
    }
    align_numbers(&mut t, 1);
    t
}

/// The readable summary of an engine's statistics.
pub fn render(s: &Stats) -> String {
    let e = &s.engine;
    let i = &s.interface;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "node {}, incarnation {}: {} port(s), {} area(s), {} slot(s), {} peer(s)\n",
        s.node,
        s.incarnation,
        s.ports.len(),
        s.areas,
        s.slots.len(),
        s.peers.len()
    );

    let totals = counter_table(&[
        ("messages delivered", i.messages),
        ("packets delivered", i.packets),
        ("bytes delivered", i.bytes),
        ("notifications posted", i.notifications),
        ("requests taken", e.requests),
        ("requests completed", e.completed),
        ("bad requests", e.bad_requests),
        ("error completions", e.error_completions),
        ("queue overflows", e.queue_overflows),
        ("orphan notifications", e.orphan_notifications),
        ("corrupt rings", e.corrupt_rings),
        ("bad control messages", e.bad_control),
        ("clients attached (ever)", e.attaches),
        ("clients detached", e.clients_detached),
        ("clients lost", e.clients_lost),
        ("goodbyes with requests left unsent", e.drains_cut),
        (
            "requests found by the sweep, not a ready hint",
            e.found_by_sweep,
        ),
        ("idle ports gone cold", e.ports_gone_cold),
        (
            "packets sent in a visit's quantum, after its first",
            e.quantum_packets,
        ),
        ("direct slots opened", e.direct_opens),
        ("direct opens refused", e.direct_refusals),
        ("quota refusals", e.quota_refusals),
        ("idle connections closed", e.idle_closed),
        ("connections refused", e.connections_refused),
        ("wake-ups for nothing", e.idle_wakes),
        ("termini held (error ring full)", e.termini_held),
        ("error completions dropped (forged)", e.errors_dropped),
        ("fabric polls held (back-pressure)", e.fabric_polls_held),
        ("engine sleeps", e.sleeps),
    ]);
    let _ = writeln!(out, "Totals\n{totals}\n");

    let remote = counter_table(&[
        ("packets sent", e.remote_sent),
        ("doorbell rings", e.doorbell_rings),
        ("packets received", e.remote_packets),
        ("bytes received", e.remote_bytes),
        ("NACKs received", e.nacks_received),
        ("NACKs sent", e.nacks_sent),
        ("NACKs undeliverable", e.nacks_undeliverable),
        ("spoofed packets", e.spoofed_packets),
        (
            "NACKs refused (nothing sent to that peer)",
            e.unmatched_nacks,
        ),
        (
            "answers refused (nothing asked of that peer)",
            e.unexpected_answers,
        ),
        (
            "reads/atomics lost (peer down, reply refused)",
            e.answers_lost,
        ),
        ("misaddressed packets", e.misaddressed_packets),
        ("peers lost", e.peers_lost),
        ("atomics executed", e.atomics),
        ("registry answers undeliverable", e.registry_undeliverable),
    ]);
    let _ = writeln!(out, "Remote\n{remote}\n");

    if i.rejects.is_empty() {
        let _ = writeln!(out, "Rejects by reason: none\n");
    } else {
        let mut rej = table(&["reason", "rejects"]);
        for (reason, n) in &i.rejects {
            rej.add_row(vec![reason.clone(), n.to_string()]);
        }
        align_numbers(&mut rej, 1);
        let _ = writeln!(out, "Rejects by reason\n{rej}\n");
    }

    let _ = writeln!(
        out,
        "Registry: home node {}, {} name(s) held here\n",
        s.registry.home, s.registry.names
    );

    match &s.fabric {
        None => {
            let _ = writeln!(out, "Fabric: none (a single node)\n");
        }
        Some(FabricStats::Tcp(t)) => {
            let tcp = counter_table(&[
                ("rails per peer", u64::from(t.rails)),
                ("connections accepted", t.accepted),
                ("connections dialed", t.dialed),
                ("frame errors", t.frame_errors),
                ("protocol violations", t.violations),
                ("authentication failures", t.auth_failures),
                ("frames refused (did not authenticate)", t.frames_refused),
                (
                    "identity mismatches (another node's id)",
                    t.closes.get("IdentityMismatch").copied().unwrap_or(0),
                ),
                ("learned peers forgotten", t.peers_forgotten),
            ]);
            let links = if t.authenticated {
                "authenticated, encrypted (cluster secret, node keys)"
            } else {
                "NOT authenticated (--danger-insecure)"
            };
            let _ = writeln!(
                out,
                "Fabric: TCP, links {links}\n{tcp}\nConnections closed: {}\n",
                counts(&t.closes)
            );
        }
        Some(FabricStats::Sim(c)) => {
            let sim = counter_table(&[
                ("sent", c.sent),
                ("delivered", c.delivered),
                ("discarded", c.discarded),
                ("dropped by fault", c.dropped_by_fault),
                ("refused full", c.refused_full),
                ("refused down", c.refused_down),
                ("sink errors", c.sink_errors),
            ]);
            let _ = writeln!(out, "Fabric: simulated\n{sim}\n");
        }
        Some(FabricStats::Channel(c)) => {
            let _ = writeln!(
                out,
                "Fabric: channel, {} packet(s) sent, {} received\n",
                c.packets_sent, c.packets_received
            );
        }
        Some(other) => {
            let _ = writeln!(out, "Fabric: {other:?}\n");
        }
    }

    if s.peers.is_empty() {
        let _ = writeln!(out, "Peers: none\n");
    } else {
        let mut pt = table(&[
            "node",
            "state",
            "incarnation",
            "link",
            "rails",
            "heartbeats sent",
            "heartbeats received",
            "packets sent",
            "packets received",
            "bytes sent",
            "bytes received",
            "reconnects",
            "empty reads",
        ]);
        for p in &s.peers {
            let mut row = vec![
                p.node.to_string(),
                if p.up { "up" } else { "down" }.to_string(),
                p.incarnation.to_string(),
            ];
            match &p.link {
                Some(l) => {
                    let c = &l.counters;
                    row.extend([
                        l.state.name().to_string(),
                        format!("{}/{}", l.rails_up, l.rails),
                        c.heartbeats_sent.to_string(),
                        c.heartbeats_received.to_string(),
                        c.packets_sent.to_string(),
                        c.packets_received.to_string(),
                        c.bytes_sent.to_string(),
                        c.bytes_received.to_string(),
                        c.dials.saturating_sub(1).to_string(),
                        c.empty_reads.to_string(),
                    ]);
                }
                None => row.extend(std::iter::repeat_n("-".to_string(), 10)),
            }
            pt.add_row(row);
        }
        align_numbers(&mut pt, 4);
        let _ = writeln!(out, "Peers\n{pt}\n");
    }

    if s.ports.is_empty() {
        let _ = writeln!(out, "Ports: none attached\n");
    } else {
        let mut pt = table(&[
            "client",
            "pid",
            "termini open",
            "termini broken",
            "queues",
            "queue overflows",
        ]);
        for p in &s.ports {
            pt.add_row(vec![
                p.client.to_string(),
                p.pid.to_string(),
                format!("{}/{}", p.termini_open, p.termini),
                p.termini_broken.to_string(),
                p.queues.to_string(),
                p.queue_overflows.to_string(),
            ]);
        }
        align_numbers(&mut pt, 0);
        let _ = writeln!(out, "Ports\n{pt}\n");
        let rates: Vec<_> = s
            .ports
            .iter()
            .flat_map(|p| p.rates.iter().map(move |r| (p.client, r)))
            .collect();
        if !rates.is_empty() {
            let mut rt = table(&[
                "client", "terminus", "bytes/s", "msgs/s", "passed", "bytes", "held",
            ]);
            let limit = |v: u64| {
                if v == 0 {
                    "-".to_string()
                } else {
                    v.to_string()
                }
            };
            for (client, r) in rates {
                rt.add_row(vec![
                    client.to_string(),
                    r.terminus.to_string(),
                    limit(r.bytes_per_sec),
                    limit(r.msgs_per_sec),
                    r.passed.to_string(),
                    r.passed_bytes.to_string(),
                    r.held.to_string(),
                ]);
            }
            align_numbers(&mut rt, 0);
            let _ = writeln!(out, "Rate limits\n{rt}\n");
        }
    }

    if s.slots.is_empty() {
        let _ = writeln!(out, "Slots: none");
    } else {
        let mut st = table(&[
            "slot", "owner", "mode", "len", "state", "packets", "bytes", "messages", "rejects",
        ]);
        for sl in &s.slots {
            let mut state = Vec::new();
            if sl.revoked {
                state.push("revoked");
            }
            if sl.inhibited {
                state.push("inhibited");
            }
            if sl.direct {
                state.push("direct");
            }
            st.add_row(vec![
                sl.slot.to_string(),
                sl.owner.to_string(),
                sl.mode.name().to_string(),
                sl.len.to_string(),
                if state.is_empty() {
                    "ok".into()
                } else {
                    state.join(", ")
                },
                sl.packets.to_string(),
                sl.bytes.to_string(),
                sl.messages.to_string(),
                counts(&sl.rejects),
            ]);
        }
        for c in [0, 1, 3, 5, 6, 7] {
            if let Some(col) = st.column_mut(c) {
                col.set_cell_alignment(CellAlignment::Right);
            }
        }
        let _ = writeln!(out, "Slots\n{st}");
    }
    let endpoints: Vec<_> = s
        .slots
        .iter()
        .filter_map(|sl| sl.endpoint.map(|e| (sl.slot, e)))
        .collect();
    if !endpoints.is_empty() {
        let mut et = table(&[
            "slot",
            "buffer size",
            "buffers",
            "posted",
            "delivered",
            "discarded",
            "discards",
            "ring corrupt",
        ]);
        for (slot, e) in endpoints {
            et.add_row(vec![
                slot.to_string(),
                e.buf_size.to_string(),
                e.buffers.to_string(),
                e.posted.to_string(),
                e.delivered.to_string(),
                e.discarded.to_string(),
                if e.report_discards {
                    "reported".into()
                } else {
                    "counted".into()
                },
                e.corrupt.to_string(),
            ]);
        }
        align_numbers(&mut et, 0);
        let _ = writeln!(out, "\nEndpoints\n{et}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use hamlyn_wire::stats::{
        InterfaceCounters, LinkCounters, LinkState, LinkStats, PeerStats, PortStats, RegistryStats,
        SlotMode, SlotStats, TcpCounters,
    };

    fn counts(pairs: &[(&str, u64)]) -> Counts {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
    }

    #[test]
    fn renders_an_engines_statistics() {
        let mut s = Stats {
            node: 3,
            incarnation: 77,
            interface: InterfaceCounters {
                packets: 9,
                bytes: 4096,
                messages: 9,
                notifications: 9,
                rejects: counts(&[("bad_key", 1)]),
            },
            ports: vec![PortStats {
                client: 1,
                pid: 4242,
                termini: 4,
                termini_open: 1,
                termini_broken: 0,
                queues: 4,
                queue_overflows: 0,
                rates: vec![hamlyn_wire::stats::TerminusRate {
                    terminus: 1,
                    bytes_per_sec: 1_000_000,
                    msgs_per_sec: 5_000,
                    passed: 77,
                    passed_bytes: 4_928,
                    held: 12,
                }],
            }],
            peers: vec![PeerStats {
                node: 4,
                up: true,
                incarnation: 31337,
                link: Some(LinkStats {
                    state: LinkState::Up,
                    rails_up: 2,
                    rails: 3,
                    counters: LinkCounters {
                        heartbeats_sent: 555,
                        heartbeats_received: 444,
                        ..LinkCounters::default()
                    },
                }),
            }],
            fabric: Some(FabricStats::Tcp(TcpCounters {
                rails: 3,
                accepted: 1,
                dialed: 2,
                frame_errors: 0,
                violations: 0,
                authenticated: true,
                auth_failures: 0,
                frames_refused: 0,
                peers_forgotten: 0,
                closes: counts(&[("PeerClosed", 6)]),
            })),
            areas: 3,
            registry: RegistryStats { home: 1, names: 5 },
            slots: vec![
                SlotStats {
                    slot: 1,
                    owner: 1,
                    mode: SlotMode::Normal,
                    len: 4096,
                    revoked: false,
                    inhibited: true,
                    direct: false,
                    packets: 9,
                    bytes: 4096,
                    messages: 9,
                    rejects: counts(&[("bad_key", 1), ("out_of_bounds", 2)]),
                    endpoint: None,
                },
                SlotStats {
                    slot: 2,
                    owner: 1,
                    mode: SlotMode::Endpoint,
                    len: 8448,
                    revoked: false,
                    inhibited: false,
                    direct: false,
                    packets: 70,
                    bytes: 700,
                    messages: 70,
                    rejects: counts(&[("no_buffer", 31)]),
                    endpoint: Some(hamlyn_wire::stats::EndpointStats {
                        buf_size: 256,
                        buffers: 32,
                        report_discards: false,
                        posted: 5,
                        delivered: 70,
                        discarded: 31,
                        corrupt: 0,
                    }),
                },
            ],
            ..Stats::default()
        };
        s.engine.nacks_sent = 8080;
        let out = render(&s);
        assert!(
            out.starts_with("node 3, incarnation 77: 1 port(s), 3 area(s), 2 slot(s), 1 peer(s)"),
            "{out}"
        );
        for want in [
            "4242",
            "1/4",
            "bad_key=1, out_of_bounds=2",
            "inhibited",
            "| bad_key",
            "engine sleeps",
            "clients detached",
            "NACKs sent",
            "8080",
            "Endpoints",
            "Rate limits",
            "1000000",
            "counted",
            "31337",
            "2/3",
            "555",
            "444",
            "Fabric: TCP",
            "PeerClosed=6",
            "home node 1, 5 name(s)",
        ] {
            assert!(out.contains(want), "{want:?} missing from\n{out}");
        }
        let empty = render(&Stats::default());
        for want in ["Peers: none", "Ports: none", "Slots: none", "Fabric: none"] {
            assert!(empty.contains(want), "{want:?} missing from\n{empty}");
        }
    }

    #[test]
    fn json_is_the_serde_form_of_the_struct() {
        let s = Stats {
            node: 3,
            fabric: Some(FabricStats::Tcp(TcpCounters::default())),
            ..Stats::default()
        };
        let text = serde_json::to_string(&s).unwrap();
        assert!(text.contains("\"kind\":\"tcp\""), "{text}");
        assert_eq!(serde_json::from_str::<Stats>(&text).unwrap(), s);
    }
}
