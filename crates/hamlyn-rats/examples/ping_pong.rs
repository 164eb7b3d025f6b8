//! Two programs' worth of ping-pong in one: each side has a simple-datagram instance and
//! answers through the reply seed that came with the last message, as seed 001 §3.2
//! shows (`srv.reply_seed().send(buf, srv.metadata_for_self())`).
//!
//! `cargo run -p hamlyn-rats --example ping_pong`

use std::time::Duration;

use hamlyn::Node;
use hamlyn_rats::simple_datagram::{SimpleClient, SimpleDatagram};
use hamlyn_rats::Manager;

/// Runs 1,000 round trips of 16 bytes between two node handles of one engine.
pub fn main() -> Result<(), Box<dyn std::error::Error>> {
    let node = Node::embedded()?;
    let other = Node::connect(node.socket_path())?;
    let (ma, mb) = (Manager::new(&node)?, Manager::new(&other)?);
    let mut a = SimpleDatagram::new(&ma, 4096)?;
    let mut b = SimpleDatagram::new(&mb, 4096)?;
    // The only thing exchanged out of band: b's seed, as text.
    let b_seed = hamlyn::seed::to_text(&b.make_seed()?)?;
    let to_b = SimpleClient::from_seed(&ma, &hamlyn::seed::from_text(&b_seed)?)?;
    let wait = Some(Duration::from_secs(10));
    to_b.send(&[0; 16], Some(&a.metadata_for_self()?), b"")?;
    for round in 0..1000u32 {
        let m = b.recv(wait)?.ok_or("b: nothing came")?;
        let mut got = b.to_vec(&m)?;
        got[..4].copy_from_slice(&(round + 1).to_le_bytes());
        b.reply_seed()?
            .send(&mb, &got, Some(&b.metadata_for_self()?), b"")?;
        let m = a.recv(wait)?.ok_or("a: nothing came")?;
        let got = a.to_vec(&m)?;
        assert_eq!(got[..4], (round + 1).to_le_bytes());
        a.reply_seed()?
            .send(&ma, &got, Some(&a.metadata_for_self()?), b"")?;
    }
    println!("1000 round trips with reply seeds");
    Ok(())
}
