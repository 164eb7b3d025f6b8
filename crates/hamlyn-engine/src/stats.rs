//! What `hamlyn stat` shows: the engine's counters, the interface's, ports, peers, the
//! fabric's, the registry and every slot, as typed pages ([`hamlyn_wire::stats`]) built
//! from the components on each `Request::Stats`.

use std::collections::BTreeMap;

use hamlyn_core::{RejectCounts, SlotMode};
use hamlyn_wire::stats::{
    fill_page, Counts, EndpointStats, InterfaceCounters, PeerStats, PortStats, RegistryStats,
    SlotMode as ModeName, SlotStats, StatsPage, StatsSection, StatsSummary, TerminusRate,
};

use crate::engine::EngineState;

fn counts(r: &RejectCounts) -> Counts {
    r.nonzero()
        .map(|(reason, n)| (reason.name().to_owned(), n))
        .collect()
}

fn mode_name(m: SlotMode) -> ModeName {
    match m {
        SlotMode::Normal => ModeName::Normal,
        SlotMode::Paranoid => ModeName::Paranoid,
        SlotMode::ParanoidOneShot => ModeName::ParanoidOneShot,
        SlotMode::Fast => ModeName::Fast,
        SlotMode::Endpoint => ModeName::Endpoint,
        _ => ModeName::Other,
    }
}

fn count32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// One page of the statistics: the `section`'s items from key `start` on, and the key
/// of the next page.
pub(crate) fn stats_page(
    st: &EngineState,
    section: StatsSection,
    start: u32,
) -> (StatsPage, Option<u32>) {
    match section {
        StatsSection::Ports => {
            let (v, next) = fill_page(st.clients.iter().filter(|c| c.id >= start).filter_map(
                |client| {
                    let port = client.port.as_ref()?;
                    Some(PortStats {
                        client: client.id,
                        pid: client.pid,
                        termini: count32(port.termini.len()),
                        termini_open: count32(
                            port.termini.iter().filter(|t| t.ring.is_some()).count(),
                        ),
                        termini_broken: count32(port.termini.iter().filter(|t| t.broken).count()),
                        queues: count32(port.queues.len()),
                        queue_overflows: port.queues.iter().map(|q| q.overflows()).sum(),
                        rates: port
                            .termini
                            .iter()
                            .enumerate()
                            .filter_map(|(t, term)| {
                                let b = term.rate.as_ref()?;
                                Some(TerminusRate {
                                    terminus: t as u16,
                                    bytes_per_sec: b.limit().bytes_per_sec,
                                    msgs_per_sec: b.limit().msgs_per_sec,
                                    passed: b.passed,
                                    passed_bytes: b.passed_bytes,
                                    held: b.held,
                                })
                            })
                            .collect(),
                    })
                },
            ));
            (StatsPage::Ports(v), next)
        }
        StatsSection::Peers => {
            let (v, next) = fill_page(peers(st).into_values().filter(|p| p.node >= start));
            (StatsPage::Peers(v), next)
        }
        StatsSection::Slots => {
            let slots = st.delivery.iface.slots();
            let (v, next) = fill_page(slots.iter().filter(|(id, _)| id.0 >= start).map(
                |(id, s)| SlotStats {
                    slot: id.0,
                    owner: s.config.owner.0,
                    mode: mode_name(s.config.mode),
                    len: s.config.len,
                    revoked: s.revoked,
                    inhibited: s.inhibited,
                    direct: s.direct,
                    packets: s.packets,
                    bytes: s.bytes,
                    messages: s.messages,
                    rejects: counts(&s.rejects),
                    endpoint: s.endpoint.map(|(spec, c)| EndpointStats {
                        buf_size: spec.layout.buf_size(),
                        buffers: spec.layout.buffers(),
                        report_discards: spec.report_discards,
                        posted: st.delivery.posted_waiting(s),
                        delivered: c.delivered,
                        discarded: c.discarded,
                        corrupt: c.corrupt,
                    }),
                },
            ));
            (StatsPage::Slots(v), next)
        }
        // The summary, and any section a newer client may name.
        _ => (StatsPage::Summary(Box::new(summary(st))), None),
    }
}

/// Everything but the lists.
fn summary(st: &EngineState) -> StatsSummary {
    let t = st.delivery.iface.stats();
    StatsSummary {
        node: st.delivery.iface.node().0,
        incarnation: st.incarnation,
        engine: st.counters,
        interface: InterfaceCounters {
            packets: t.packets,
            bytes: t.bytes,
            messages: t.messages,
            notifications: t.notifications,
            rejects: counts(&t.rejects),
        },
        fabric: st.remote.as_ref().and_then(|r| r.fabric().fabric_stats()),
        areas: st.delivery.areas.len() as u64,
        registry: RegistryStats {
            home: st.registry_home().0,
            names: st.registry.len() as u64,
        },
    }
}

/// The peers the engine holds (up or down, with the incarnation last announced) and the
/// ones only its fabric knows yet, with the fabric's view of each link.
fn peers(st: &EngineState) -> BTreeMap<u32, PeerStats> {
    let mut out = BTreeMap::new();
    let Some(remote) = &st.remote else {
        return out;
    };
    for (node, p) in remote.peers.iter() {
        out.insert(
            node.0,
            PeerStats {
                node: node.0,
                up: p.up,
                incarnation: p.incarnation,
                link: None,
            },
        );
    }
    for (node, link) in remote.fabric().link_stats() {
        out.entry(node.0)
            .or_insert_with(|| PeerStats {
                node: node.0,
                ..PeerStats::default()
            })
            .link = Some(link);
    }
    out
}
