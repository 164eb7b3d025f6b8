//! `hamlyn seed`: seeds as text, for shells, environment variables and files — show
//! what one holds, publish one under a name in the cluster's registry, look one up.

use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use hamlyn_wire::control::{Reply, Request};
use hamlyn_wire::Seed;

use crate::control::{Control, ControlError};
use crate::socket::{DEFAULT_SOCKET, SOCKET_ENV};

/// `hamlyn seed` arguments.
#[derive(Debug, Args)]
pub struct SeedArgs {
    /// What to do.
    #[command(subcommand)]
    pub action: SeedAction,
    /// The local engine's control socket (publish, lookup).
    #[arg(long, global = true, value_name = "PATH", env = SOCKET_ENV, default_value = DEFAULT_SOCKET)]
    pub socket: PathBuf,
}

/// A `hamlyn seed` action.
#[derive(Debug, Subcommand)]
pub enum SeedAction {
    /// Print what a seed holds. SEED is the text, `@FILE`, `env:NAME`, or `-` for stdin.
    Show {
        /// The seed.
        seed: String,
    },
    /// Publish a seed under NAME in the cluster's name registry, and hold it there until
    /// interrupted (a name goes when its publisher disconnects).
    Publish {
        /// The name.
        name: String,
        /// The seed: text, `@FILE`, `env:NAME` or `-`.
        seed: String,
    },
    /// Print the seed published under NAME (e.g. `export S=$(hamlyn seed lookup svc)`).
    Lookup {
        /// The name.
        name: String,
    },
}

/// Why a seed command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SeedError {
    /// The seed text could not be read from where it was said to be.
    #[error("cannot read the seed from {from}: {why}")]
    Source {
        /// Where.
        from: String,
        /// Why.
        why: String,
    },
    /// The text is not a valid seed.
    #[error("not a valid seed: {0}")]
    Invalid(#[from] hamlyn_wire::WireError),
    /// The engine could not be asked.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// The engine refused, or could not be reached as a client.
    #[error(transparent)]
    Node(hamlyn::Error),
    /// The interrupt handler could not be installed.
    #[error("cannot install the SIGINT/SIGTERM handler: {0}")]
    Signal(String),
}

/// The seed text behind an argument: literal text, `@FILE`, `env:NAME` or `-` (stdin).
pub fn read_seed_arg(arg: &str) -> Result<String, SeedError> {
    let source = |from: &str, why: String| SeedError::Source {
        from: from.to_owned(),
        why,
    };
    if arg == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(|e| source("stdin", e.to_string()))?;
        return Ok(s);
    }
    if let Some(path) = arg.strip_prefix('@') {
        return std::fs::read_to_string(path).map_err(|e| source(path, e.to_string()));
    }
    if let Some(name) = arg.strip_prefix("env:") {
        return std::env::var(name).map_err(|e| source(&format!("${name}"), e.to_string()));
    }
    Ok(arg.to_owned())
}

/// What a seed holds, one line per field.
pub fn describe(seed: &Seed) -> String {
    let mut out = format!(
        "protocol {}, {} ticket(s), {} data byte(s)\n",
        seed.protocol,
        seed.tickets.len(),
        seed.data.len()
    );
    for (i, t) in seed.tickets.iter().enumerate() {
        out.push_str(&format!(
            "ticket {i}: node {} (incarnation {}), slot {}, key {:#018x}, bytes {}..{}, entries {}..{}, share {} (Y = {}), flags {:#x}\n",
            t.node.0,
            t.incarnation,
            t.slot.0,
            t.key,
            t.offset,
            t.offset.saturating_add(t.len),
            t.meta_first,
            t.meta_first.saturating_add(t.meta_count),
            t.share,
            t.y(),
            t.flags.0
        ));
    }
    out
}

/// Runs a seed action.
pub fn run(args: SeedArgs) -> Result<(), SeedError> {
    let timeout = Duration::from_secs(10);
    match args.action {
        SeedAction::Show { seed } => {
            let seed = Seed::from_text(&read_seed_arg(&seed)?)?;
            print!("{}", describe(&seed));
        }
        SeedAction::Publish { name, seed } => {
            let text = read_seed_arg(&seed)?;
            let parsed = Seed::from_text(&text)?;
            // A name lives as long as its publisher's connection: this command attaches
            // as a client, publishes, and holds the name until told to stop (or until
            // the engine goes away).
            // The interrupt handler goes in before the name is published: whoever finds
            // the name may interrupt us at once, and an interrupt before the handler
            // killed the process instead of letting it say goodbye.
            let stop = std::sync::Arc::new(hamlyn_shm::sync::AtomicBool::new(false));
            let flag = stop.clone();
            ctrlc::set_handler(move || {
                // Release: pairs with the Acquire load below.
                flag.store(true, hamlyn_shm::sync::Ordering::Release);
            })
            .map_err(|e| SeedError::Signal(e.to_string()))?;
            let node = hamlyn::Node::connect(&args.socket).map_err(SeedError::Node)?;
            node.publish(&name, &parsed).map_err(SeedError::Node)?;
            eprintln!("published {name:?}; holding it until interrupted");
            // Acquire: pairs with the handler's Release store.
            while !stop.load(hamlyn_shm::sync::Ordering::Acquire) && !node.engine_gone() {
                std::thread::sleep(Duration::from_millis(100));
            }
            eprintln!("{name:?} is no longer published");
        }
        SeedAction::Lookup { name } => {
            match Control::connect(&args.socket, timeout)?.call(&Request::Lookup { name })? {
                Reply::Seed { seed } => println!("{seed}"),
                _ => return Err(ControlError::Unexpected.into()),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hamlyn_wire::{NodeId, SlotId, Ticket, TicketFlags, FULL_SHARE};

    #[test]
    fn seeds_come_from_text_files_and_the_environment() {
        let t = Ticket {
            node: NodeId(2),
            incarnation: 9,
            slot: SlotId(4),
            key: 0xABCD,
            meta_first: 0,
            meta_count: 2,
            offset: 64,
            len: 4096,
            share: FULL_SHARE,
            flags: TicketFlags::WRITE,
        };
        let text = Seed::single(t).to_text().unwrap();
        assert_eq!(read_seed_arg(&text).unwrap(), text);
        let path = std::env::temp_dir().join(format!("hamlyn-seed-{}", std::process::id()));
        std::fs::write(&path, format!("{text}\n")).unwrap();
        let from_file = read_seed_arg(&format!("@{}", path.display())).unwrap();
        let _ = std::fs::remove_file(&path);
        assert_eq!(
            Seed::from_text(&from_file).unwrap().tickets[0],
            t,
            "trailing newline is fine"
        );
        std::env::set_var("HAMLYN_TEST_SEED_VAR", &text);
        assert_eq!(read_seed_arg("env:HAMLYN_TEST_SEED_VAR").unwrap(), text);
        assert!(matches!(
            read_seed_arg("@/nonexistent/seed"),
            Err(SeedError::Source { .. })
        ));
        let d = describe(&Seed::from_text(&text).unwrap());
        assert!(
            d.contains("node 2 (incarnation 9), slot 4") && d.contains("bytes 64..4160"),
            "{d}"
        );
    }
}
