//! A stand-in engine for unit tests: it answers the control protocol over a socket pair
//! and hands the test the engine's side of the port, so the test can play the engine
//! (take requests, advance completion words, push errors, post notifications).

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use hamlyn_shm::fdpass::{recv_with_fds, send_with_fds, seqpacket_pair};
use hamlyn_shm::port::{PortGeometry, PortLayout};
use hamlyn_shm::region::ShmRegion;
use hamlyn_shm::spsc;
use hamlyn_shm::sync::Ordering;
use hamlyn_shm::wake::EventFd;
use hamlyn_wire::control::{ControlErrorCode, Reply, Request, MAX_CONTROL_MSG};
use hamlyn_wire::request::{Completion, SendRequest, COMPLETION_LEN, REQUEST_LEN};

use crate::control::Control;
use crate::node::{Node, NodeOptions};

/// Ring capacity of the fake engine's termini.
pub(crate) const FAKE_RING_CAP: u32 = 64;

/// What the fake engine shares with the test.
#[derive(Debug)]
pub(crate) struct FakeEngine {
    /// The port (engine's mapping).
    pub(crate) port: Arc<ShmRegion>,
    /// The port's queue file (engine's mapping).
    pub(crate) queue_file: Arc<ShmRegion>,
    /// Its layout.
    pub(crate) layout: PortLayout,
    /// The doorbell's end the engine waits on (the client pokes the other).
    pub(crate) doorbell: EventFd,
    /// The port event descriptor's end the engine pokes (the client waits on the other).
    pub(crate) event: EventFd,
    /// Every request received, in order.
    pub(crate) log: Arc<Mutex<Vec<Request>>>,
    /// Registered areas, by id (the engine's mappings).
    pub(crate) areas: Arc<Mutex<HashMap<u32, ShmRegion>>>,
    /// Terminus consumers, created on demand.
    consumers: HashMap<u16, spsc::Consumer<Arc<ShmRegion>>>,
    errors: spsc::Producer<Arc<ShmRegion>>,
    thread: Option<JoinHandle<()>>,
}

struct Attached {
    port: Arc<ShmRegion>,
    queue_file: Arc<ShmRegion>,
    layout: PortLayout,
    doorbell: EventFd,
    event: EventFd,
}

fn dup(fd: impl AsFd) -> OwnedFd {
    rustix::io::fcntl_dupfd_cloexec(fd, 0).expect("dup")
}

/// A node attached to a fresh fake engine.
pub(crate) fn fake_node(options: NodeOptions) -> (Node, FakeEngine) {
    let (client, engine) = seqpacket_pair().expect("socketpair");
    let (tx, rx) = mpsc::channel::<Attached>();
    let log = Arc::new(Mutex::new(Vec::new()));
    let areas = Arc::new(Mutex::new(HashMap::new()));
    let (log2, areas2) = (log.clone(), areas.clone());
    let thread = std::thread::spawn(move || serve(engine, tx, log2, areas2));
    let control = Control::from_socket(client, Duration::from_secs(5)).expect("control");
    let node = Node::attach(control, PathBuf::new(), options, None).expect("attach");
    let a = rx.recv().expect("attached");
    let errors = spsc::Producer::attach(a.port.clone(), a.layout.errors).expect("error ring");
    let fake = FakeEngine {
        port: a.port,
        queue_file: a.queue_file,
        layout: a.layout,
        doorbell: a.doorbell,
        event: a.event,
        log,
        areas,
        consumers: HashMap::new(),
        errors,
        thread: Some(thread),
    };
    (node, fake)
}

fn serve(
    sock: OwnedFd,
    tx: mpsc::Sender<Attached>,
    log: Arc<Mutex<Vec<Request>>>,
    areas: Arc<Mutex<HashMap<u32, ShmRegion>>>,
) {
    let mut buf = vec![0u8; MAX_CONTROL_MSG];
    let mut next_id = 1u32;
    loop {
        let Ok(got) = recv_with_fds(&sock, &mut buf) else {
            return;
        };
        let req = Request::decode(&buf[..got.len]).expect("request decodes");
        log.lock().unwrap().push(req.clone());
        let mut fds_out: Vec<OwnedFd> = Vec::new();
        let reply = match req {
            Request::Attach {
                termini,
                queues,
                queue_cap,
                ..
            } => {
                let layout = PortLayout::new(PortGeometry {
                    termini,
                    queues,
                    ring_cap: FAKE_RING_CAP,
                    queue_cap,
                    err_cap: 64,
                })
                .expect("layout");
                let port = Arc::new(ShmRegion::create("fake-port", layout.total).expect("port"));
                assert!(layout.write_header(&*port));
                let queue_file =
                    Arc::new(ShmRegion::create("fake-queues", layout.queue_total).expect("queues"));
                let (event, client_event) = EventFd::pair().expect("event channel");
                let (client_doorbell, doorbell) = EventFd::pair().expect("doorbell channel");
                fds_out = vec![
                    dup(port.fd()),
                    dup(queue_file.fd()),
                    client_event.into_fd(),
                    client_doorbell.into_fd(),
                ];
                let port_len = layout.total as u64;
                tx.send(Attached {
                    port,
                    queue_file,
                    layout,
                    doorbell,
                    event,
                })
                .expect("test alive");
                Reply::Attached {
                    client: 1,
                    node: 7,
                    incarnation: 99,
                    port_len,
                }
            }
            Request::RegisterArea { len } => {
                let mut fds = got.fds;
                assert_eq!(fds.len(), 1, "RegisterArea carries the area fd");
                let region = ShmRegion::from_fd(fds.remove(0), len as usize).expect("area fd");
                let id = next_id;
                next_id += 1;
                areas.lock().unwrap().insert(id, region);
                Reply::Area { area: id }
            }
            Request::CreateSlot { .. } => {
                let id = next_id;
                next_id += 1;
                Reply::Slot {
                    slot: id,
                    key: 0x5107_0000 + u64::from(id),
                }
            }
            Request::Rekey { slot } => Reply::Slot {
                slot,
                key: 0xBEEF_0000 + u64::from(slot),
            },
            Request::Stats { section, .. } => {
                use hamlyn_wire::stats::{StatsPage, StatsSection, StatsSummary};
                let page = match section {
                    StatsSection::Ports => StatsPage::Ports(Vec::new()),
                    StatsSection::Peers => StatsPage::Peers(Vec::new()),
                    StatsSection::Slots => StatsPage::Slots(Vec::new()),
                    _ => StatsPage::Summary(Box::new(StatsSummary {
                        node: 7,
                        ..StatsSummary::default()
                    })),
                };
                Reply::StatsPage { page, next: None }
            }
            Request::UnregisterArea { area } => {
                areas.lock().unwrap().remove(&area);
                Reply::Ok
            }
            Request::Revoke { slot: 666 } => Reply::Error {
                code: ControlErrorCode::NotFound as u16,
                message: "no such slot".into(),
            },
            _ => Reply::Ok,
        };
        let borrowed: Vec<_> = fds_out.iter().map(|f| f.as_fd()).collect();
        if send_with_fds(&sock, &reply.encode(), &borrowed).is_err() {
            return;
        }
    }
}

impl FakeEngine {
    /// Takes the next request of terminus `t`, if any.
    pub(crate) fn take(&mut self, t: u16) -> Option<SendRequest> {
        let (port, layout) = (&self.port, &self.layout);
        let c = self.consumers.entry(t).or_insert_with(|| {
            spsc::Consumer::attach(port.clone(), layout.termini[usize::from(t)]).expect("ring")
        });
        let mut buf = [0u8; REQUEST_LEN];
        c.pop(&mut buf)
            .expect("ring ok")
            .then(|| SendRequest::decode(&buf).expect("request decodes"))
    }

    /// Sets terminus `t`'s completion word (Release) and wakes a client asleep on it, as
    /// the engine does.
    pub(crate) fn finish(&self, t: u16, finished: u64) {
        let off = self.layout.completion_word(t).expect("terminus");
        self.port
            .atomic_u64(off)
            .expect("word")
            .store(finished, Ordering::Release);
        let wake = self.layout.completion_wake_word(t).expect("terminus");
        hamlyn_shm::wake::wake_after_publish(self.port.atomic_u32(wake).expect("word"), None);
    }

    /// Pushes an error completion.
    pub(crate) fn fail(&mut self, t: u16, seq: u32, status: u16) {
        assert!(self.try_fail(t, seq, status), "error ring has room");
    }

    /// Pushes an error completion if the error ring has room.
    pub(crate) fn try_fail(&mut self, t: u16, seq: u32, status: u16) -> bool {
        let c = Completion {
            seq,
            status,
            terminus: t,
            value: 0,
        };
        let bytes: [u8; COMPLETION_LEN] = c.encode();
        self.errors.try_push(&bytes).is_ok()
    }

    /// The requests received so far.
    pub(crate) fn requests(&self) -> Vec<Request> {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for FakeEngine {
    fn drop(&mut self) {
        // The serving thread ends when the client side closes; don't wait for it here
        // (the node may outlive the fake in a test).
        drop(self.thread.take());
    }
}
