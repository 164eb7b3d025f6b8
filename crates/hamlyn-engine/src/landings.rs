//! The packets from other nodes whose payload is being read, by packet identity: a map
//! with one place in front of it. A stream fabric may read a payload over several polls,
//! interleaved with other rails' packets, so the state of a packet is found again by its
//! identity; but almost every packet is read whole right after its header, and then its
//! state lives in the front place and is found by one comparison. A hash of the identity
//! (std's SipHash, which a peer's choice of identities cannot make slow) cost about 400
//! instructions, three times per packet: a quarter of the receiving engine's work for an
//! 8-byte message over TCP (2026-11-25, docs/PERFORMANCE.md).
//!
//! It behaves as a `HashMap` (property-tested against one below): at most one state per
//! identity, an insert replaces what the identity had.

use std::collections::HashMap;
use std::hash::Hash;

/// States by identity: the front place, then the map.
#[derive(Debug)]
pub(crate) struct Landings<K, V> {
    /// The packet landing now (the common case: read whole right after its header).
    front: Option<(K, V)>,
    /// The others (payloads read over several polls, beside other packets).
    rest: HashMap<K, V>,
}

impl<K, V> Default for Landings<K, V> {
    fn default() -> Self {
        Landings {
            front: None,
            rest: HashMap::new(),
        }
    }
}

impl<K: Eq + Hash, V> Landings<K, V> {
    /// `key`'s state is `value` (replacing what it had).
    pub(crate) fn insert(&mut self, key: K, value: V) {
        match &mut self.front {
            Some((k, v)) if *k == key => *v = value,
            None if self.rest.is_empty() => self.front = Some((key, value)),
            // A key may be in the map only while the map has something.
            None if !self.rest.contains_key(&key) => self.front = Some((key, value)),
            _ => {
                self.rest.insert(key, value);
            }
        }
    }

    /// `key`'s state.
    pub(crate) fn get(&self, key: &K) -> Option<&V> {
        match &self.front {
            Some((k, v)) if k == key => Some(v),
            _ if self.rest.is_empty() => None,
            _ => self.rest.get(key),
        }
    }

    /// `key`'s state, to change.
    pub(crate) fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        match &mut self.front {
            Some((k, v)) if k == key => Some(v),
            _ if self.rest.is_empty() => None,
            _ => self.rest.get_mut(key),
        }
    }

    /// Takes `key`'s state out.
    pub(crate) fn remove(&mut self, key: &K) -> Option<V> {
        if self.front.as_ref().is_some_and(|(k, _)| k == key) {
            return self.front.take().map(|(_, v)| v);
        }
        if self.rest.is_empty() {
            return None;
        }
        self.rest.remove(key)
    }

    /// Keeps the states `keep` says to keep (it may change them).
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&K, &mut V) -> bool) {
        if let Some((k, v)) = &mut self.front {
            if !keep(k, v) {
                self.front = None;
            }
        }
        self.rest.retain(|k, v| keep(k, v));
    }

    /// States held.
    #[cfg(test)]
    fn len(&self) -> usize {
        usize::from(self.front.is_some()) + self.rest.len()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        Insert(u8, u32),
        Get(u8),
        Bump(u8),
        Remove(u8),
        RetainOdd,
    }

    fn op() -> impl Strategy<Value = Op> {
        // Few keys, so that inserts replace and removes find.
        let key = 0u8..6;
        prop_oneof![
            4 => (key.clone(), any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
            2 => key.clone().prop_map(Op::Get),
            1 => key.clone().prop_map(Op::Bump),
            3 => key.prop_map(Op::Remove),
            1 => Just(Op::RetainOdd),
        ]
    }

    proptest! {
        /// Any sequence of operations answers as a `HashMap` does.
        #[test]
        fn behaves_as_a_hash_map(ops in proptest::collection::vec(op(), 0..200)) {
            let mut l = Landings::default();
            let mut model: HashMap<u8, u32> = HashMap::new();
            for o in ops {
                match o {
                    Op::Insert(k, v) => {
                        l.insert(k, v);
                        model.insert(k, v);
                    }
                    Op::Get(k) => prop_assert_eq!(l.get(&k), model.get(&k)),
                    Op::Bump(k) => {
                        if let Some(v) = l.get_mut(&k) {
                            *v = v.wrapping_add(1);
                        }
                        if let Some(v) = model.get_mut(&k) {
                            *v = v.wrapping_add(1);
                        }
                    }
                    Op::Remove(k) => prop_assert_eq!(l.remove(&k), model.remove(&k)),
                    Op::RetainOdd => {
                        l.retain(|_, v| *v % 2 == 1);
                        model.retain(|_, v| *v % 2 == 1);
                    }
                }
                prop_assert_eq!(l.len(), model.len());
            }
            for k in 0..6 {
                prop_assert_eq!(l.get(&k), model.get(&k));
            }
        }
    }

    #[test]
    fn a_packet_read_whole_never_reaches_the_map() {
        let mut l = Landings::default();
        for i in 0..100u32 {
            l.insert(i, i);
            assert_eq!(l.get(&i), Some(&i));
            assert_eq!(l.remove(&i), Some(i));
        }
        assert!(l.rest.is_empty() && l.front.is_none());
        // Two interleaved: the second waits in the map, and both are found.
        l.insert(1, 10);
        l.insert(2, 20);
        assert_eq!(l.rest.len(), 1);
        assert_eq!(l.remove(&1), Some(10));
        assert_eq!(l.remove(&2), Some(20));
        assert_eq!(l.len(), 0);
    }
}
