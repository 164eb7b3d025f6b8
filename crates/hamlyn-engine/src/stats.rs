//! What `hamlyn stat` shows: the engine's counters, the core's, ports, peers, the
//! fabric's, the registry and every slot, as JSON.

use std::fmt::Write;

use hamlyn_core::{RejectCounts, SlotMode};

use crate::engine::EngineState;

fn rejects_json(out: &mut String, r: &RejectCounts) {
    out.push('{');
    for (i, (reason, n)) in r.nonzero().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "\"{}\":{n}", reason.name());
    }
    out.push('}');
}

fn mode_name(m: SlotMode) -> &'static str {
    match m {
        SlotMode::Normal => "normal",
        SlotMode::Paranoid => "paranoid",
        SlotMode::ParanoidOneShot => "paranoid_one_shot",
        SlotMode::Fast => "fast",
        _ => "other",
    }
}

/// Everything `hamlyn stat` shows, as JSON.
pub(crate) fn stats_json(st: &EngineState) -> String {
    {
        let c = &st.counters;
        let t = st.delivery.iface.stats();
        let mut o = String::with_capacity(1024);
        let _ = write!(
            o,
            "{{\"node\":{},\"incarnation\":{},",
            st.delivery.iface.node().0,
            st.incarnation
        );
        let _ = write!(
            o,
            "\"engine\":{{\"attaches\":{},\"clients_lost\":{},\"requests\":{},\"bad_requests\":{},\"completed\":{},\"error_completions\":{},\"packets\":{},\"bytes\":{},\"notifications\":{},\"queue_overflows\":{},\"orphan_notifications\":{},\"corrupt_rings\":{},\"bad_control\":{},\"sleeps\":{},\"remote_packets\":{},\"remote_bytes\":{},\"nacks_received\":{},\"nacks_sent\":{},\"nacks_undeliverable\":{},\"spoofed_packets\":{},\"peers_lost\":{},\"atomics\":{},\"registry_undeliverable\":{},\"misaddressed_packets\":{},\"direct_opens\":{},\"direct_refusals\":{}}},",
            c.attaches, c.clients_lost, c.requests, c.bad_requests, c.completed, c.error_completions, c.packets, c.bytes,
            c.notifications, c.queue_overflows, c.orphan_notifications, c.corrupt_rings, c.bad_control, c.sleeps, c.remote_packets, c.remote_bytes, c.nacks_received, c.nacks_sent,
            c.nacks_undeliverable, c.spoofed_packets, c.peers_lost, c.atomics, c.registry_undeliverable, c.misaddressed_packets,
            c.direct_opens, c.direct_refusals
        );
        let _ = write!(o, "\"interface\":{{\"packets\":{},\"bytes\":{},\"messages\":{},\"notifications\":{},\"rejects\":", t.packets, t.bytes, t.messages, t.notifications);
        rejects_json(&mut o, &t.rejects);
        o.push_str("},\"ports\":[");
        let mut first = true;
        for client in st.clients.iter() {
            let Some(port) = &client.port else { continue };
            if !first {
                o.push(',');
            }
            first = false;
            let open = port.termini.iter().filter(|t| t.ring.is_some()).count();
            let broken = port.termini.iter().filter(|t| t.broken).count();
            let overflows: u64 = port.queues.iter().map(|q| q.overflows()).sum();
            let _ = write!(
                o,
                "{{\"client\":{},\"pid\":{},\"termini\":{},\"termini_open\":{open},\"termini_broken\":{broken},\"queues\":{},\"queue_overflows\":{overflows}}}",
                client.id, client.pid, port.termini.len(), port.queues.len()
            );
        }
        if let Some(f) = st.remote.as_ref().and_then(|r| r.fabric().stats_json()) {
            o.push_str("],\"fabric\":");
            o.push_str(&f);
            o.push_str(",\"peers\":[");
        } else {
            o.push_str("],\"peers\":[");
        }
        if let Some(remote) = &st.remote {
            for (i, (node, p)) in remote.peers.iter().enumerate() {
                if i > 0 {
                    o.push(',');
                }
                let _ = write!(
                    o,
                    "{{\"node\":{},\"up\":{},\"incarnation\":{}}}",
                    node.0, p.up, p.incarnation
                );
            }
        }
        let _ = write!(
            o,
            "],\"areas\":{},\"registry\":{{\"home\":{},\"names\":{}}},\"slots\":[",
            st.delivery.areas.len(),
            st.registry_home().0,
            st.registry.len()
        );
        for (i, (id, s)) in st.delivery.iface.slots().iter().enumerate() {
            if i > 0 {
                o.push(',');
            }
            let _ = write!(
                o,
                "{{\"slot\":{},\"owner\":{},\"mode\":\"{}\",\"len\":{},\"revoked\":{},\"inhibited\":{},\"direct\":{},\"packets\":{},\"bytes\":{},\"messages\":{},\"rejects\":",
                id.0, s.config.owner.0, mode_name(s.config.mode), s.config.len, s.revoked, s.inhibited, s.direct, s.packets, s.bytes, s.messages
            );
            rejects_json(&mut o, &s.rejects);
            o.push('}');
        }
        o.push_str("]}");
        o
    }
}
