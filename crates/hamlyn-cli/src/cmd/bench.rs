//! `hamlyn bench` and its peer process: the benchmark of the `hamlyn-bench` crate, run on
//! engines set up with the same options as `hamlyn node`'s. Without the `bench` feature
//! the subcommand is still there, and says the build left the benchmark out.

#[cfg(feature = "bench")]
pub use with_bench::*;
#[cfg(not(feature = "bench"))]
pub use without_bench::*;

#[cfg(feature = "bench")]
mod with_bench {
    use clap::Args;
    use hamlyn_engine::EngineConfig;

    use crate::cmd::node::EngineArgs;

    /// `hamlyn bench` arguments: the benchmark's, then the settings of the engines it
    /// starts.
    #[derive(Debug, Args)]
    pub struct BenchCmd {
        /// The benchmark's options.
        #[command(flatten)]
        pub bench: hamlyn_bench::BenchArgs,
        /// The embedded engines' settings (`--busy-poll` also makes the TCP fabrics
        /// busy-poll).
        #[command(flatten)]
        pub engine: EngineArgs,
    }

    /// Runs the benchmark on engines set up as `cmd.engine` says.
    pub fn run(cmd: BenchCmd) -> Result<(), hamlyn_bench::BenchError> {
        hamlyn_bench::run(cmd.bench, &cmd.engine.apply(EngineConfig::embedded()))
    }
}

#[cfg(not(feature = "bench"))]
mod without_bench {
    use clap::Args;

    /// `hamlyn bench` in a build without the benchmark: takes any arguments, and refuses.
    #[derive(Debug, Args)]
    pub struct BenchCmd {
        /// Ignored.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
        pub args: Vec<String>,
    }

    /// Why `hamlyn bench` does not run in this build.
    #[derive(Debug, thiserror::Error)]
    #[error(
        "this hamlyn was built without the benchmark (hamlyn-cli's `bench` cargo feature, \
         on by default); build it with `cargo build --release -p hamlyn-cli --features bench`"
    )]
    pub struct NoBench;

    /// Says that this build has no benchmark.
    pub fn run(_: BenchCmd) -> Result<(), NoBench> {
        Err(NoBench)
    }
}
