//! The fabric conformance suite run against the simulated network, over several seeds
//! and link shapes (tight links that push back early, wide jitter that reorders a lot,
//! zero delay).

use hamlyn_core::Instant;
use hamlyn_fabric::{SimConfig, SimFabric, SimNet};
use hamlyn_testkit::conformance::{self, FabricFactory, FabricSet, Limits};
use hamlyn_wire::NodeId;

/// A simulated net plus the clock the suite drives.
struct SimSet {
    net: SimNet,
    now: Instant,
}

impl FabricSet for SimSet {
    type Node<'a> = SimFabric<'a>;

    fn nodes(&self) -> usize {
        self.net.nodes()
    }
    fn node(&mut self, i: usize) -> SimFabric<'_> {
        self.net.fabric(NodeId(i as u32))
    }
    fn now(&mut self) -> Instant {
        self.now
    }
    fn advance(&mut self) {
        self.now = match self.net.next_event_time() {
            Some(t) if t > self.now => t,
            _ => self.now.plus_nanos(1_000),
        };
    }
    fn crash(&mut self, i: usize) {
        self.net.crash(NodeId(i as u32)).expect("node exists");
    }
}

struct SimFactory {
    seed: u64,
    config: SimConfig,
}

impl FabricFactory for SimFactory {
    type Set = SimSet;
    type Error = std::convert::Infallible;

    fn build(&mut self, nodes: usize) -> Result<SimSet, Self::Error> {
        self.seed += 1;
        Ok(SimSet {
            net: SimNet::new(nodes, self.seed, self.config),
            now: Instant(0),
        })
    }

    fn limits(&self) -> Limits {
        Limits {
            max_rounds: 20_000,
            ..Limits::default()
        }
    }
}

fn run(config: SimConfig) {
    for seed in [1u64, 1000, 0xDEAD_BEEF] {
        let mut f = SimFactory { seed, config };
        if let Err(e) = conformance::run_all(&mut f) {
            panic!("seed {seed}, {config:?}: {e}");
        }
    }
}

#[test]
fn sim_passes_with_default_links() {
    run(SimConfig::default());
}

#[test]
fn sim_passes_with_tight_links_and_wide_jitter() {
    run(SimConfig {
        min_delay: 0,
        max_delay: 1_000_000,
        link_capacity: 2,
    });
}

#[test]
fn sim_passes_with_zero_delay() {
    run(SimConfig {
        min_delay: 0,
        max_delay: 0,
        link_capacity: 1,
    });
}
