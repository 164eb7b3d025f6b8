//! Links between endpoints: per pair, datagram channels (short and bulk) into receive
//! buffers each side granted the other, set up through the cluster's name registry.
//!
//! Every endpoint has a *door* (a tagged slot) published as `am.door.<node>.<client>`.
//! To link with B, A grants B credits on its receivers and publishes the two seeds as
//! `am.link.<A>.<B>.s` / `.b`, then knocks on B's door with a hello whose tag is A's
//! client id (its node is the packet's authenticated source). B, polling, does the same
//! for A and builds its senders from A's seeds; A finds B's seeds and builds its own. A
//! hello that names no published seeds is counted and ignored.

use std::collections::HashMap;

use hamlyn::Node;
use hamlyn_rats::datagram::DatagramSender;
use hamlyn_rats::tagged::{TaggedClient, TaggedServer};
use hamlyn_rats::{InstanceId, Manager};

use crate::endpoint::{Addr, AmOptions};
use crate::AmError;

/// The senders of one link.
#[derive(Debug)]
pub(crate) struct Link {
    pub(crate) short: DatagramSender,
    pub(crate) bulk: DatagramSender,
    /// The receiver's bulk buffer size (header included).
    pub(crate) bulk_max: u64,
}

/// An endpoint's links.
#[derive(Debug)]
pub(crate) struct Links {
    node: Node,
    mgr: Manager,
    me: Addr,
    door: TaggedServer,
    links: HashMap<Addr, Link>,
    /// Peers whose seeds we published.
    granted: HashMap<Addr, ()>,
    /// Who each sender number of our receivers is (in grant order).
    short_peers: Vec<Addr>,
    bulk_peers: Vec<Addr>,
    options: AmOptions,
}

fn door_name(a: Addr) -> String {
    format!("am.door.{}.{}", a.node.0, a.client)
}

fn link_name(from: Addr, to: Addr, kind: &str) -> String {
    format!(
        "am.link.{}.{}.{}.{}.{kind}",
        from.node.0, from.client, to.node.0, to.client
    )
}

impl Links {
    pub(crate) fn new(node: &Node, mgr: &Manager, options: AmOptions) -> Result<Links, AmError> {
        let me = Addr {
            node: node.id(),
            client: node.client_id(),
        };
        let door = TaggedServer::new(mgr, 64)?;
        node.publish(&door_name(me), &door.make_seed()?)?;
        Ok(Links {
            node: node.clone(),
            mgr: mgr.clone(),
            me,
            door,
            links: HashMap::new(),
            granted: HashMap::new(),
            short_peers: Vec::new(),
            bulk_peers: Vec::new(),
            options,
        })
    }

    pub(crate) fn get(&mut self, to: Addr) -> Option<&mut Link> {
        self.links.get_mut(&to)
    }

    pub(crate) fn door_id(&self) -> InstanceId {
        self.door.id()
    }

    pub(crate) fn short_peer(&self, sender: u32) -> Option<Addr> {
        self.short_peers.get(sender as usize).copied()
    }

    pub(crate) fn bulk_peer(&self, sender: u32) -> Option<Addr> {
        self.bulk_peers.get(sender as usize).copied()
    }

    /// Grants `peer` credits on our receivers (once) and publishes the seeds.
    pub(crate) fn grant(
        &mut self,
        peer: Addr,
        short_rx: &mut hamlyn_rats::datagram::DatagramReceiver,
        bulk_rx: &mut hamlyn_rats::datagram::DatagramReceiver,
    ) -> Result<(), AmError> {
        if self.granted.contains_key(&peer) {
            return Ok(());
        }
        if self.granted.len() >= self.options.max_peers as usize {
            return Err(AmError::TooLong {
                len: self.granted.len() as u64 + 1,
                max: u64::from(self.options.max_peers),
            });
        }
        let s = short_rx.make_seed(self.options.short_credits)?;
        self.short_peers.push(peer);
        let b = bulk_rx.make_seed(self.options.bulk_credits)?;
        self.bulk_peers.push(peer);
        self.node.publish(&link_name(self.me, peer, "s"), &s)?;
        self.node.publish(&link_name(self.me, peer, "b"), &b)?;
        self.granted.insert(peer, ());
        Ok(())
    }

    /// Builds our senders to `peer` if it published its seeds for us; whether linked.
    pub(crate) fn try_link(&mut self, peer: Addr) -> Result<bool, AmError> {
        if self.links.contains_key(&peer) {
            return Ok(true);
        }
        let Ok(s) = self.node.lookup(&link_name(peer, self.me, "s")) else {
            return Ok(false);
        };
        let Ok(b) = self.node.lookup(&link_name(peer, self.me, "b")) else {
            return Ok(false);
        };
        let short = DatagramSender::from_seed(&self.mgr, &s)?;
        let bulk = DatagramSender::from_seed(&self.mgr, &b)?;
        if short.max_len() == 0 || bulk.max_len() == 0 {
            return Err(AmError::Rats(hamlyn_rats::RatsError::BadSeed(
                "a link seed grants nothing",
            )));
        }
        let bulk_max = bulk.max_len();
        self.links.insert(
            peer,
            Link {
                short,
                bulk,
                bulk_max,
            },
        );
        Ok(true)
    }

    /// Whether `peer` is still there: its door's name leaves the registry with its
    /// connection. An unreachable registry says nothing (assumed there).
    pub(crate) fn is_gone(&self, peer: Addr) -> bool {
        matches!(
            self.node.lookup(&door_name(peer)),
            Err(hamlyn::Error::Refused {
                code: Some(hamlyn::ControlErrorCode::NotFound),
                ..
            })
        )
    }

    /// Withdraws every name this endpoint published (its door first, then the seeds it
    /// granted peers), while its slots are still there: a peer that finds a name finds a
    /// live slot, and one that sees the door gone takes the endpoint for gone. Best
    /// effort: an engine that cannot answer has lost the connection, names and all.
    pub(crate) fn withdraw_names(&self) {
        let _ = self.node.unpublish(&door_name(self.me));
        for &peer in self.granted.keys() {
            for kind in ["s", "b"] {
                let _ = self.node.unpublish(&link_name(self.me, peer, kind));
            }
        }
    }

    /// Knocks on `peer`'s door (after granting it credits).
    pub(crate) fn hello(&mut self, peer: Addr) -> Result<(), AmError> {
        let door = self.node.lookup(&door_name(peer))?;
        let knock = TaggedClient::from_seed(&self.mgr, &door)?;
        knock.write(0, &[1], self.me.client)?;
        Ok(())
    }

    /// Answers the hellos that arrived: grants each peer credits and links with it.
    /// Returns how many named no one who published seeds for us, and how many links
    /// failed (seeds that are not a link's, no room for another peer).
    pub(crate) fn hellos(
        &mut self,
        short_rx: &mut hamlyn_rats::datagram::DatagramReceiver,
        bulk_rx: &mut hamlyn_rats::datagram::DatagramReceiver,
    ) -> Result<(u64, u64), AmError> {
        let (mut bad, mut failed) = (0, 0);
        while let Some(t) = self.door.get_tag()? {
            let peer = Addr {
                node: t.src,
                client: t.tag,
            };
            if self.links.contains_key(&peer) && self.granted.contains_key(&peer) {
                continue;
            }
            match self.try_link(peer) {
                Ok(true) => {}
                Ok(false) => {
                    bad += 1;
                    continue;
                }
                Err(_) => {
                    failed += 1;
                    continue;
                }
            }
            if self.grant(peer, short_rx, bulk_rx).is_err() {
                failed += 1;
            }
        }
        Ok((bad, failed))
    }
}
