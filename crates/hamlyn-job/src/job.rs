//! A process's membership of a job: its connection, the barrier's slots, and the seeds
//! every rank published at start.

use std::time::{Duration, Instant};

use hamlyn::{
    Area, ControlErrorCode, MetaArea, Node, NotifyQueue, Seed, Slot, SlotPerms, Terminus,
};

use crate::barrier::Barrier;
use crate::{JobError, Launch};

/// How long a collective waits for the other ranks by default.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// One process of a parallel job (see the crate docs).
pub struct Job {
    pub(crate) launch: Launch,
    pub(crate) node: Node,
    pub(crate) terminus: Terminus,
    pub(crate) queue: NotifyQueue,
    pub(crate) barrier: Barrier,
    /// Collectives of `all_gather` so far (each uses fresh names).
    pub(crate) gathers: u64,
    pub(crate) timeout: Duration,
    /// What the barrier's tickets point into, kept alive as long as the job.
    _keep: (Vec<Slot>, Vec<MetaArea>, Vec<Area>),
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("launch", &self.launch)
            .finish_non_exhaustive()
    }
}

impl Job {
    /// Joins the job this process was started in ([`Launch::from_env`]), through the
    /// engine at `HAMLYN_SOCKET` (or the default socket). Returns once every rank has
    /// joined.
    pub fn init() -> Result<Job, JobError> {
        Job::join(Launch::from_env()?, Node::connect_default()?)
    }

    /// Joins the job `launch` describes through `node` (a connection of this process
    /// that the job keeps for itself). Returns once every rank has joined.
    pub fn join(launch: Launch, node: Node) -> Result<Job, JobError> {
        let timeout = std::env::var("HAMLYN_JOB_TIMEOUT_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(DEFAULT_TIMEOUT, Duration::from_millis);
        Job::join_with_timeout(launch, node, timeout)
    }

    /// [`Job::join`] with the collectives' timeout given (joining is one of them)
    /// instead of read from `HAMLYN_JOB_TIMEOUT_MS`: for bindings and programs that take
    /// it as an argument.
    pub fn join_with_timeout(
        launch: Launch,
        node: Node,
        timeout: Duration,
    ) -> Result<Job, JobError> {
        let queue = node.queue(0)?;
        let terminus = node.terminus(0)?;
        // Where releases land (a message per barrier), and the fetch-and-add's answer.
        let mut areas = Vec::new();
        let mut metas = Vec::new();
        let mut slots = Vec::new();
        let area = node.area(4096)?;
        let meta = node.meta_area(8)?;
        let release = node
            .slot(&area)
            .range(0..64)
            .meta(&meta)
            .queue(0)
            .create()?;
        let reply = node
            .slot(&area)
            .range(64..128)
            .meta(&meta)
            .queue(0)
            .create()?;
        let mut mine = vec![release.ticket(0..64, 0..8)?];
        let reply_ticket = reply.ticket(0..64, 0..8)?;
        let release_slot = release.id();
        slots.push(release);
        slots.push(reply);
        if launch.rank == 0 {
            // The barrier's counter: one word that every rank adds 1 to.
            let counter = node
                .slot(&area)
                .range(128..136)
                .meta(&meta)
                .perms(SlotPerms {
                    write: false,
                    read: true,
                    atomic: true,
                })
                .create()?;
            mine.push(counter.ticket_all()?);
            slots.push(counter);
        }
        areas.push(area);
        metas.push(meta);
        let mut job = Job {
            barrier: Barrier::new(release_slot, reply_ticket),
            launch,
            node,
            terminus,
            queue,
            gathers: 0,
            timeout,
            _keep: (slots, metas, areas),
        };
        let seed = Seed {
            protocol: 0,
            tickets: mine,
            data: Vec::new(),
        };
        let seeds = job.exchange("setup", &seed)?;
        let counter = seeds[0].tickets.get(1).copied().ok_or(JobError::BadSeed {
            rank: 0,
            why: "no barrier counter".into(),
        })?;
        let mut releases = Vec::with_capacity(seeds.len());
        for (r, s) in seeds.iter().enumerate() {
            releases.push(*s.tickets.first().ok_or(JobError::BadSeed {
                rank: r as u32,
                why: "no release ticket".into(),
            })?);
        }
        job.barrier.connect(counter, releases);
        // Everyone has everyone's tickets: the setup names can go.
        job.barrier()?;
        job.node.unpublish(&job.name("setup", job.launch.rank))?;
        Ok(job)
    }

    /// This process's rank, `0..size`.
    pub fn rank(&self) -> u32 {
        self.launch.rank
    }

    /// Processes in the job.
    pub fn size(&self) -> u32 {
        self.launch.size
    }

    /// Where the rank and size came from.
    pub fn launch(&self) -> &Launch {
        &self.launch
    }

    /// The job's own connection (its first notification queue and terminus are the
    /// job's; open another [`Node`] for the application's traffic).
    pub fn node(&self) -> &Node {
        &self.node
    }

    /// How long collectives wait for the other ranks (default two minutes, or
    /// `HAMLYN_JOB_TIMEOUT_MS`).
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// The registry name of `rank`'s part of collective `what`.
    pub(crate) fn name(&self, what: &str, rank: u32) -> String {
        format!("hamlyn-job/{}/{what}/{rank}", self.launch.job)
    }

    /// Publishes `seed` as this rank's part of `what` and returns every rank's, in rank
    /// order (looked up until published, within the timeout).
    pub(crate) fn exchange(&mut self, what: &str, seed: &Seed) -> Result<Vec<Seed>, JobError> {
        self.node
            .publish(&self.name(what, self.launch.rank), seed)?;
        let deadline = Instant::now() + self.timeout;
        let mut out = Vec::with_capacity(self.launch.size as usize);
        for r in 0..self.launch.size {
            let name = self.name(what, r);
            let seed = loop {
                match self.node.lookup(&name) {
                    Ok(s) => break s,
                    Err(hamlyn::Error::Refused {
                        code: Some(ControlErrorCode::NotFound | ControlErrorCode::Unreachable),
                        ..
                    }) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    Err(hamlyn::Error::Refused {
                        code: Some(ControlErrorCode::NotFound),
                        ..
                    }) => {
                        return Err(JobError::Timeout {
                            what: format!("rank {r} to publish {what:?}"),
                            after_ms: self.timeout.as_millis(),
                        })
                    }
                    Err(e) => return Err(e.into()),
                }
            };
            out.push(seed);
        }
        Ok(out)
    }
}
