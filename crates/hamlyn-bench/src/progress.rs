//! The progress bar on standard error (drawn only when it is a terminal).

use std::borrow::Cow;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Counts the benchmark's steps.
#[derive(Debug)]
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A bar of `steps` steps; hidden when standard error is not a terminal.
    pub fn new(steps: u64) -> Progress {
        let bar = ProgressBar::with_draw_target(Some(steps), ProgressDrawTarget::stderr());
        if let Ok(style) =
            ProgressStyle::with_template("[{elapsed_precise}] {bar:30} {pos}/{len} {wide_msg}")
        {
            bar.set_style(style);
        }
        Progress { bar }
    }

    /// Names the step now running, and logs it at debug level (`--log debug`) with its
    /// time, so that a profile of the whole run (`perf record -a`) can be cut into its
    /// steps.
    pub fn start(&self, what: impl Into<Cow<'static, str>>) {
        let what = what.into();
        tracing::debug!(step = %what, "measuring");
        self.bar.set_message(what);
    }

    /// Counts a step as done.
    pub fn done(&self) {
        self.bar.inc(1);
    }

    /// Removes the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
