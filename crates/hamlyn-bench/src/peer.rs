//! The second process of `hamlyn bench` (`hamlyn bench-peer`, hidden): it obeys one-line
//! commands on its standard input and answers on its standard output.
//!
//! | command | does | answer |
//! |---|---|---|
//! | `floor PATH` | maps the floor memfd at PATH, echoes until told to stop | `floor-ready`, then `ok ROUNDS` |
//! | `connect SOCKET` | attaches (SOCKET is the rest of the line) to the engine and sets up its endpoint | `tickets INBOX POLLED RMA` (seeds) |
//! | `peer INBOX POLLED RMA` | learns the driver's tickets | `ok` |
//! | `open-direct` | maps the driver's inbox and polled slot for direct deposits | `ok` |
//! | `floor-relay PATH SPIN` | echoes through the driver's relay, waiting as a Hamlyn receiver does | `floor-ready`, then `ok ROUNDS` |
//! | `pin CPU` | pins its thread to CPU | `ok` |
//! | `disconnect` | drops its endpoint (detaches from the engine) | `ok` |
//! | `pong VIA EXCHANGE SIZE ROUNDS SERIES` | answers ROUNDS rounds of a ping-pong of SIZE-byte messages (VIA `mediated` or `direct`; EXCHANGE `tagged`, `datagram` or `polled`; SERIES numbers the polled flags) | `ok` |
//! | `stream VIA SIZE COUNT` | sends COUNT messages of SIZE bytes as fast as it can | `ok` |
//! | `tcp-connect ADDR` | opens the raw TCP floor's connection to the driver at ADDR | `ok` |
//! | `tcp-pong SIZE ROUNDS WAIT` | echoes ROUNDS messages of SIZE bytes over that connection, reading with blocking calls (`block`) or spinning (`spin`) | `ok` |
//! | `tcp-stream SIZE COUNT WAIT` | writes COUNT messages of SIZE bytes to it, blocking or spinning | `ok` |
//! | `tcp-close` | closes it | `ok` |
//! | `tcp-node ADDR SECRET RAILS BUSY MTU TURNS SPIN_US INTRA` | starts node 1's engine in this process over TCP, node 0 at ADDR (`tcp::PeerNode`) | `tcp-node ADDR SOCKET` (its fabric's address, its control socket) |
//! | `tcp-node-stop` | stops that engine | `ok` |
//! | `quit` (or end of input) | exits | — |
//!
//! Any failure is answered `error MESSAGE`, and the process exits with status 1.

use std::io::{BufRead, Write};
use std::path::Path;

use clap::Args;

use super::bandwidth::send_stream;
use super::endpoint::{Endpoint, Remote, Tickets, Via};
use super::error::BenchError;
use super::floor::FloorShm;
use super::latency::{pong, Exchange, PingPong};
use super::pin::{allowed_cpus, pin_to};
use super::tcp::{PeerNode, RawTcp, Wait};

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
    driver: Option<Remote>,
    tcp: Option<RawTcp>,
    /// Node 1's engine, when the driver asked this process to host it (`tcp-node`).
    node: Option<hamlyn_engine::EngineHandle>,
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
            let seeds = ep.tickets()?.to_text()?;
            state.endpoint = Some(ep);
            say(out, &format!("tickets {seeds}"))?;
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
        // The CPUs the peer's thread may run on (the driver records where each phase ran).
        Some("cpus") => {
            let cpus: Vec<String> = allowed_cpus()?.iter().map(|c| c.to_string()).collect();
            say(out, &format!("cpus {}", cpus.join(",")))?;
        }
        Some("disconnect") => {
            state.endpoint = None;
            state.driver = None;
            say(out, "ok")?;
        }
        Some("peer") => {
            state.driver = Some(Remote::new(Tickets::from_words(words)?));
            say(out, "ok")?;
        }
        Some(cmd @ ("pong" | "stream" | "open-direct")) => {
            let (Some(ep), Some(to)) = (state.endpoint.as_mut(), state.driver.as_mut()) else {
                return Err(BenchError::Peer(format!(
                    "`connect` and `peer` must come before `{cmd}`"
                )));
            };
            if cmd == "open-direct" {
                ep.open_direct(to)?;
                say(out, "ok")?;
                return Ok(Next::Continue);
            }
            let via = words.next().and_then(Via::from_word).ok_or_else(missing)?;
            if cmd == "pong" {
                let exchange = words
                    .next()
                    .and_then(Exchange::from_word)
                    .ok_or_else(missing)?;
                let size: usize = arg(words.next(), line)?;
                let rounds: u64 = arg(words.next(), line)?;
                let series: u32 = arg(words.next(), line)?;
                let how = PingPong {
                    via,
                    exchange,
                    size,
                    series,
                };
                pong(ep, to, how, rounds)?;
            } else {
                let size: usize = arg(words.next(), line)?;
                let count: u64 = arg(words.next(), line)?;
                send_stream(ep, to, via, size, count)?;
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
        Some("tcp-node") => {
            if state.node.is_some() {
                return Err(BenchError::Peer("node 1 is running already".into()));
            }
            let spec = PeerNode::parse(words).ok_or_else(missing)?;
            let (engine, addr) = spec.start()?;
            let socket = engine.socket_path().display().to_string();
            state.node = Some(engine);
            say(out, &format!("tcp-node {addr} {socket}"))?;
        }
        Some("tcp-node-stop") => {
            state.endpoint = None;
            state.driver = None;
            if let Some(engine) = state.node.take() {
                engine.stop()?;
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
