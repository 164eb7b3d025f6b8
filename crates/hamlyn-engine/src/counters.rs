//! The engine's own counters (beyond the core's per-slot and per-interface ones): what
//! each component did, for `hamlyn stat`. Plain numbers, bumped by whoever does the work;
//! the struct is the one the statistics carry ([`hamlyn_wire::stats::EngineCounters`],
//! every field documented there), so a new counter is declared once.

pub(crate) use hamlyn_wire::stats::EngineCounters;
