//! `hamlyn ping NODE`: round trips through this node's engine and NODE's engine (the
//! local engine forwards the call over its fabric; the far engine runs its resident
//! `hamlyn.ping` active-message handler, which answers with the sequence number and its
//! node id), reported like ping(8).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use hamlyn_wire::control::{am_engine, Reply, Request};

use crate::control::{Control, ControlError};
use crate::socket::{DEFAULT_SOCKET, SOCKET_ENV};

/// `hamlyn ping` arguments.
#[derive(Debug, Args)]
pub struct PingArgs {
    /// The node to reach.
    pub node: u32,
    /// The local engine's control socket.
    #[arg(long, value_name = "PATH", env = SOCKET_ENV, default_value = DEFAULT_SOCKET)]
    pub socket: PathBuf,
    /// Round trips to make.
    #[arg(long, short = 'c', default_value_t = 5)]
    pub count: u32,
    /// Pause between round trips, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 200)]
    pub interval_ms: u64,
    /// Longest wait for one answer, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 5000)]
    pub timeout_ms: u64,
}

/// Pings; fails if any round trip failed.
pub fn run(args: PingArgs) -> Result<(), ControlError> {
    let mut control = Control::connect(&args.socket, Duration::from_millis(args.timeout_ms))?;
    let mut rtts = Vec::with_capacity(args.count as usize);
    let mut failed = None;
    for i in 0..args.count {
        if i > 0 {
            std::thread::sleep(Duration::from_millis(args.interval_ms));
        }
        let t = Instant::now();
        let ping = Request::AmCall {
            node: args.node,
            handler: am_engine::PING,
            args: [u64::from(i), 0, 0, 0],
        };
        match control.call(&ping) {
            Ok(Reply::AmReply { args: a }) if a[..2] == [u64::from(i), u64::from(args.node)] => {
                let rtt = t.elapsed();
                println!(
                    "reply from node {}: seq={i} time={:.1} µs",
                    args.node,
                    rtt.as_secs_f64() * 1e6
                );
                rtts.push(rtt);
            }
            Ok(_) => failed = Some(ControlError::Unexpected),
            Err(e) => {
                println!("no reply from node {}: seq={i}: {e}", args.node);
                failed = Some(e);
            }
        }
    }
    if let (Some(min), Some(max)) = (rtts.iter().min(), rtts.iter().max()) {
        let avg = rtts.iter().sum::<Duration>() / rtts.len() as u32;
        println!(
            "{} of {} answered; round trip min/avg/max = {:.1}/{:.1}/{:.1} µs",
            rtts.len(),
            args.count,
            min.as_secs_f64() * 1e6,
            avg.as_secs_f64() * 1e6,
            max.as_secs_f64() * 1e6
        );
    }
    failed.map_or(Ok(()), Err)
}
