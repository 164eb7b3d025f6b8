//! The engine's counters and their JSON form (`hamlyn stat`).

use std::fmt::Write;

use hamlyn_core::{RejectCounts, SlotMode};

use crate::engine::EngineState;

/// Counters the engine keeps beyond the core's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineCounters {
    /// Clients that attached.
    pub attaches: u64,
    /// Clients whose socket closed (exit or death).
    pub clients_lost: u64,
    /// Requests taken from termini.
    pub requests: u64,
    /// Requests that did not decode or segment.
    pub bad_requests: u64,
    /// Requests finished (successfully or not).
    pub completed: u64,
    /// Error completions handed to clients.
    pub error_completions: u64,
    /// Packets delivered.
    pub packets: u64,
    /// Payload bytes delivered.
    pub bytes: u64,
    /// Notifications posted.
    pub notifications: u64,
    /// Notifications refused by a full queue (counted in the queue too).
    pub queue_overflows: u64,
    /// Notifications for a queue whose client is gone.
    pub orphan_notifications: u64,
    /// Terminus rings found corrupt (and no longer served).
    pub corrupt_rings: u64,
    /// Control messages that did not decode.
    pub bad_control: u64,
    /// Times the engine went to sleep.
    pub sleeps: u64,
    /// Packets received from other nodes and committed.
    pub remote_packets: u64,
    /// Payload bytes received from other nodes.
    pub remote_bytes: u64,
    /// NACKs received from other nodes.
    pub nacks_received: u64,
    /// NACKs sent to other nodes.
    pub nacks_sent: u64,
    /// NACKs whose destination could not be reached.
    pub nacks_undeliverable: u64,
    /// Packets whose header named another source than the connection they came on.
    pub spoofed_packets: u64,
    /// Peers lost.
    pub peers_lost: u64,
    /// Remote atomics executed.
    pub atomics: u64,
    /// Registry answers that could not be sent back.
    pub registry_undeliverable: u64,
    /// Packets from the fabric addressed to another node.
    pub misaddressed_packets: u64,
    /// Direct slots mapped for a ticket holder (`OpenDirect` granted).
    pub direct_opens: u64,
    /// `OpenDirect` requests refused.
    pub direct_refusals: u64,
}

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

impl EngineState {
    /// Everything `hamlyn stat` shows, as JSON.
    pub fn stats_json(&self) -> String {
        let c = &self.counters;
        let t = self.iface.stats();
        let mut o = String::with_capacity(1024);
        let _ = write!(
            o,
            "{{\"node\":{},\"incarnation\":{},",
            self.iface.node().0,
            self.incarnation
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
        for client in self.clients.iter().flatten() {
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
        if let Some(f) = self.remote.as_ref().and_then(|r| r.fabric.stats_json()) {
            o.push_str("],\"fabric\":");
            o.push_str(&f);
            o.push_str(",\"peers\":[");
        } else {
            o.push_str("],\"peers\":[");
        }
        if let Some(remote) = &self.remote {
            let mut peers: Vec<_> = remote.peers.iter().collect();
            peers.sort_by_key(|(n, _)| **n);
            for (i, (node, p)) in peers.into_iter().enumerate() {
                if i > 0 {
                    o.push(',');
                }
                let _ = write!(
                    o,
                    "{{\"node\":{node},\"up\":{},\"incarnation\":{}}}",
                    p.up, p.incarnation
                );
            }
        }
        let _ = write!(
            o,
            "],\"areas\":{},\"registry\":{{\"home\":{},\"names\":{}}},\"slots\":[",
            self.areas.len(),
            self.registry_home().0,
            self.registry.len()
        );
        for (i, (id, s)) in self.iface.slots().iter().enumerate() {
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
