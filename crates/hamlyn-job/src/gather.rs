//! All-gather of seeds through the registry.

use hamlyn::Seed;

use crate::{Job, JobError};

impl Job {
    /// Every rank's `seed`, in rank order: each rank publishes its own under a name of
    /// this collective and looks up the others'. A collective: every rank calls it, in
    /// the same order as its other collectives. The names are removed again once every
    /// rank has read them (a barrier), so a long job does not fill the registry.
    pub fn all_gather(&mut self, seed: &Seed) -> Result<Vec<Seed>, JobError> {
        let what = format!("gather{}", self.gathers);
        self.gathers += 1;
        let all = self.exchange(&what, seed)?;
        self.barrier()?;
        self.node.unpublish(&self.name(&what, self.launch.rank))?;
        Ok(all)
    }
}
