//! Active-message handlers the engine runs itself (seed 003 §5.4: predefined handlers
//! every endpoint has; §4.3: a device's functions exposed as handlers). Every engine has
//! them, under the first ids of the cluster's handler table ([`am_engine`]'s names and
//! ids): `hamlyn.ping`, `hamlyn.echo`, `hamlyn.counter` and `hamlyn.stats`. A client
//! reaches them with [`Request::AmCall`], forwarded to the named node like a ping.
//!
//! [`Request::AmCall`]: hamlyn_wire::control::Request::AmCall

use hamlyn_wire::control::{am_engine, ControlErrorCode, Reply};
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
}
