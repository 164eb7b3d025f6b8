//! Active-message handlers the engine runs itself (seed 003 §5.4: predefined handlers
//! every endpoint has; §4.3: a device's functions exposed as handlers). Every engine has
//! them, under the first ids of the cluster's handler table ([`am_engine`]'s names and
//! ids): `hamlyn.ping`, `hamlyn.echo`, `hamlyn.counter` and `hamlyn.stats`. A client
//! reaches them with [`Request::AmCall`], forwarded to the named node like a ping.
//!
//! [`Request::AmCall`]: hamlyn_wire::control::Request::AmCall

use std::collections::{BTreeMap, HashMap};

use hamlyn_wire::control::{am_engine, AmCounts, ControlErrorCode, Reply, MAX_AM_REPORT};
use hamlyn_wire::NodeId;

/// The engine-resident handlers' state: the remote counter and the calls each answered.
#[derive(Debug, Default)]
pub(crate) struct EngineHandlers {
    counter: u64,
    calls: [u64; 4],
}

impl EngineHandlers {
    /// Runs handler `handler` with `args` on this engine (node `me`).
    pub(crate) fn call(&mut self, me: NodeId, handler: u32, args: [u64; 4]) -> Reply {
        let Some(calls) = self.calls.get_mut(handler as usize) else {
            return Reply::Error {
                code: ControlErrorCode::NotFound as u16,
                message: format!("no engine-resident handler with id {handler}"),
            };
        };
        *calls += 1;
        let args = match handler {
            am_engine::PING => [args[0], u64::from(me.0), 0, 0],
            am_engine::ECHO => args,
            am_engine::COUNTER => {
                let before = self.counter;
                self.counter = before.wrapping_add(args[0]);
                [before, self.counter, 0, 0]
            }
            _ => self.calls,
        };
        Reply::AmReply { args }
    }

    /// Calls each handler answered, by id.
    #[cfg(test)]
    pub(crate) fn calls(&self) -> [u64; 4] {
        self.calls
    }
}

/// What this engine's clients reported of their own handlers (`AmReport`), kept until
/// they leave, summed by name for `hamlyn stat` (`AmCounters`).
#[derive(Debug, Default)]
pub(crate) struct ClientReports {
    by_client: HashMap<u32, Vec<(String, AmCounts)>>,
}

impl ClientReports {
    /// Client `cid`'s report, replacing its last (bounded by the request's decoder).
    pub(crate) fn report(&mut self, cid: u32, handlers: Vec<(String, AmCounts)>) -> Reply {
        if handlers.len() > MAX_AM_REPORT {
            return Reply::Error {
                code: ControlErrorCode::InvalidArgument as u16,
                message: format!("at most {MAX_AM_REPORT} handlers per report"),
            };
        }
        self.by_client.insert(cid, handlers);
        Reply::Ok
    }

    /// Every client's counters summed by handler name (the first [`MAX_AM_REPORT`]
    /// names).
    pub(crate) fn sum(&self) -> Reply {
        let mut sum: BTreeMap<&str, AmCounts> = BTreeMap::new();
        for rows in self.by_client.values() {
            for (name, c) in rows {
                let s = sum.entry(name).or_default();
                s.calls = s.calls.saturating_add(c.calls);
                s.replies = s.replies.saturating_add(c.replies);
                s.errors = s.errors.saturating_add(c.errors);
                s.refused = s.refused.saturating_add(c.refused);
            }
        }
        Reply::AmCounters {
            handlers: sum
                .into_iter()
                .take(MAX_AM_REPORT)
                .map(|(n, c)| (n.to_owned(), c))
                .collect(),
        }
    }

    /// Client `cid` left: its report goes.
    pub(crate) fn forget(&mut self, cid: u32) {
        self.by_client.remove(&cid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_handler_answers_and_counts() {
        let mut h = EngineHandlers::default();
        let me = NodeId(7);
        let reply = |r| match r {
            Reply::AmReply { args } => args,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            reply(h.call(me, am_engine::PING, [9, 0, 0, 0])),
            [9, 7, 0, 0]
        );
        assert_eq!(
            reply(h.call(me, am_engine::ECHO, [1, 2, 3, 4])),
            [1, 2, 3, 4]
        );
        assert_eq!(
            reply(h.call(me, am_engine::COUNTER, [5, 0, 0, 0])),
            [0, 5, 0, 0]
        );
        assert_eq!(
            reply(h.call(me, am_engine::COUNTER, [2, 0, 0, 0])),
            [5, 7, 0, 0]
        );
        assert_eq!(reply(h.call(me, am_engine::STATS, [0; 4])), [1, 1, 2, 1]);
        assert!(matches!(h.call(me, 4, [0; 4]), Reply::Error { .. }));
        assert_eq!(h.calls(), [1, 1, 2, 1]);
    }

    #[test]
    fn reports_are_summed_by_name_and_leave_with_their_client() {
        let mut r = ClientReports::default();
        let c = |calls| AmCounts {
            calls,
            replies: calls,
            errors: 1,
            refused: 0,
        };
        r.report(1, vec![("a".into(), c(2)), ("b".into(), c(1))]);
        r.report(2, vec![("a".into(), c(3))]);
        r.report(2, vec![("a".into(), c(5))]);
        let Reply::AmCounters { handlers } = r.sum() else {
            panic!()
        };
        assert_eq!(
            handlers,
            vec![
                (
                    "a".into(),
                    AmCounts {
                        calls: 7,
                        replies: 7,
                        errors: 2,
                        refused: 0
                    }
                ),
                ("b".into(), c(1))
            ]
        );
        r.forget(1);
        let Reply::AmCounters { handlers } = r.sum() else {
            panic!()
        };
        assert_eq!(handlers, vec![("a".into(), c(5))]);
    }
}
