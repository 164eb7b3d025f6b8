//! The second process of `hamlyn bench` (`hamlyn bench-peer`, hidden): it obeys one-line
//! commands on its standard input and answers on its standard output.
//!
//! | command | does | answer |
//! |---|---|---|
//! | `floor PATH` | maps the floor memfd at PATH, echoes until told to stop | `floor-ready`, then `ok ROUNDS` |
//! | `connect SOCKET` | attaches (SOCKET is the rest of the line) to the engine and sets up its endpoint | `ticket SEED` (its inbox) |
//! | `peer SEED` | learns the driver's inbox ticket | `ok` |
//! | `floor-relay PATH SPIN` | echoes through the driver's relay, waiting as a Hamlyn receiver does | `floor-ready`, then `ok ROUNDS` |
//! | `pin CPU` | pins its thread to CPU | `ok` |
//! | `disconnect` | drops its endpoint (detaches from the engine) | `ok` |
//! | `pong SIZE ROUNDS` | echoes ROUNDS messages of SIZE bytes | `ok` |
//! | `stream SIZE COUNT` | sends COUNT messages of SIZE bytes as fast as it can | `ok` |
//! | `tcp-connect ADDR` | opens the raw TCP floor's connection to the driver at ADDR | `ok` |
//! | `tcp-pong SIZE ROUNDS WAIT` | echoes ROUNDS messages of SIZE bytes over that connection, reading with blocking calls (`block`) or spinning (`spin`) | `ok` |
//! | `tcp-stream SIZE COUNT WAIT` | writes COUNT messages of SIZE bytes to it, blocking or spinning | `ok` |
//! | `tcp-close` | closes it | `ok` |
//! | `quit` (or end of input) | exits | — |
//!
//! Any failure is answered `error MESSAGE`, and the process exits with status 1.

use std::io::{BufRead, Write};
use std::path::Path;

use clap::Args;
use hamlyn::Ticket;

use super::bandwidth::send_stream;
use super::endpoint::Endpoint;
use super::error::BenchError;
use super::floor::FloorShm;
use super::latency::pong;
use super::pin::pin_to;
use super::tcp::{RawTcp, Wait};

/// `hamlyn bench-peer` arguments.
#[derive(Debug, Args)]
pub struct PeerArgs {
    /// Pin this process's thread to this CPU.
    #[arg(long, value_name = "CPU")]
    pub pin_cpu: Option<usize>,
    /// Polls a waiting receiver spins through before it sleeps.
    #[arg(long, value_name = "POLLS")]
    pub spin: Option<u32>,
}

#[derive(Debug, Default)]
struct State {
    endpoint: Option<Endpoint>,
    driver: Option<Ticket>,
    tcp: Option<RawTcp>,
}

/// What a command asks of the loop.
enum Next {
    Continue,
    Quit,
}

/// Runs the command loop until `quit` or the end of standard input.
pub fn run(args: PeerArgs) -> Result<(), BenchError> {
    if let Some(cpu) = args.pin_cpu {
        pin_to(cpu)?;
    }
    let stdin = std::io::stdin().lock();
    let mut out = std::io::stdout().lock();
    let mut state = State::default();
    for line in stdin.lines() {
        let line = line.map_err(|e| BenchError::io("reading commands", e))?;
        match obey(line.trim(), &args, &mut state, &mut out) {
            Ok(Next::Continue) => {}
            Ok(Next::Quit) => break,
            Err(e) => {
                // The driver may be gone already; the exit status says it too.
                let _ = say(&mut out, &format!("error {e}"));
                return Err(e);
            }
        }
    }
    Ok(())
}

fn say(out: &mut impl Write, line: &str) -> Result<(), BenchError> {
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| BenchError::io("answering the driver", e))
}

fn arg<T: std::str::FromStr>(word: Option<&str>, line: &str) -> Result<T, BenchError> {
    word.and_then(|w| w.parse().ok())
        .ok_or_else(|| BenchError::BadCommand(line.to_string()))
}

fn obey(
    line: &str,
    args: &PeerArgs,
    state: &mut State,
    out: &mut impl Write,
) -> Result<Next, BenchError> {
    let mut words = line.split_whitespace();
    let missing = || BenchError::BadCommand(line.to_string());
    match words.next() {
        Some("floor") => {
            let shm = FloorShm::open(words.next().ok_or_else(missing)?)?;
            say(out, "floor-ready")?;
            let rounds = shm.pong()?;
            say(out, &format!("ok {rounds}"))?;
        }
        Some("connect") => {
            // The rest of the line: a socket path may contain spaces.
            let socket = line["connect".len()..].trim();
            if socket.is_empty() {
                return Err(missing());
            }
            let ep = Endpoint::connect(Path::new(socket), args.spin)?;
            let seed = ep.ticket_text()?;
            state.endpoint = Some(ep);
            say(out, &format!("ticket {seed}"))?;
        }
        Some("floor-relay") => {
            let shm = FloorShm::open(words.next().ok_or_else(missing)?)?;
            let spin: u32 = arg(words.next(), line)?;
            say(out, "floor-ready")?;
            let rounds = shm.pong_relayed(spin)?;
            say(out, &format!("ok {rounds}"))?;
        }
        Some("pin") => {
            pin_to(arg(words.next(), line)?)?;
            say(out, "ok")?;
        }
        Some("disconnect") => {
            state.endpoint = None;
            state.driver = None;
            say(out, "ok")?;
        }
        Some("peer") => {
            let seed = words.next().ok_or_else(missing)?;
            state.driver = Some(hamlyn::seed::ticket_from_text(seed)?);
            say(out, "ok")?;
        }
        Some(cmd @ ("pong" | "stream")) => {
            let size: usize = arg(words.next(), line)?;
            let count: u64 = arg(words.next(), line)?;
            let (Some(ep), Some(to)) = (state.endpoint.as_mut(), state.driver.as_ref()) else {
                return Err(BenchError::Peer(
                    "`connect` and `peer` must come before `pong` and `stream`".into(),
                ));
            };
            if cmd == "pong" {
                pong(ep, to, size, count)?;
            } else {
                send_stream(ep, to, size, count)?;
            }
            say(out, "ok")?;
        }
        Some("tcp-connect") => {
            let addr = arg(words.next(), line)?;
            state.tcp = Some(RawTcp::connect(addr)?);
            say(out, "ok")?;
        }
        Some(cmd @ ("tcp-pong" | "tcp-stream")) => {
            let size: usize = arg(words.next(), line)?;
            let count: u64 = arg(words.next(), line)?;
            let Some(tcp) = state.tcp.as_mut() else {
                return Err(BenchError::Peer(
                    "`tcp-connect` must come before `tcp-pong` and `tcp-stream`".into(),
                ));
            };
            let wait = words.next().and_then(Wait::from_word).ok_or_else(missing)?;
            if cmd == "tcp-pong" {
                tcp.pong(size, count, wait)?;
            } else {
                tcp.send_stream(size, count, wait)?;
            }
            say(out, "ok")?;
        }
        Some("tcp-close") => {
            state.tcp = None;
            say(out, "ok")?;
        }
        Some("quit") => return Ok(Next::Quit),
        Some(_) => return Err(missing()),
        None => {}
    }
    Ok(Next::Continue)
}
