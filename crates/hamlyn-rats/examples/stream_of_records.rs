//! A stream of records from one thread (its own node handle) to another, read back as
//! zero-copy views of the receiver's ring and released as they are used, so the sender
//! never overruns the receiver.
//!
//! `cargo run -p hamlyn-rats --example stream_of_records`

use std::time::Duration;

use hamlyn::Node;
use hamlyn_rats::stream::{StreamReceiver, StreamSender};
use hamlyn_rats::{Manager, RatsError};

/// Sends 10,000 records of 1 to 10,000 bytes and checks each one.
pub fn main() -> Result<(), Box<dyn std::error::Error>> {
    let node = Node::embedded()?;
    let m = Manager::new(&node)?;
    let mut rx = StreamReceiver::new(&m, 1 << 20, 16)?;
    let seed = hamlyn::seed::to_text(&rx.make_seed()?)?;
    let sender_node = Node::connect(node.socket_path())?;
    let sender = std::thread::spawn(move || -> Result<(), RatsError> {
        let m = Manager::new(&sender_node)?;
        let seed = hamlyn::seed::from_text(&seed)?;
        let mut tx = StreamSender::from_seed(&m, &seed)?;
        for i in 0..10_000u32 {
            let len = 1 + (i as usize * 7919) % 10_000;
            tx.write_record(&vec![i as u8; len])?;
        }
        // Wait for the end to leave before this thread's node handle goes with it.
        tx.close()?.wait(Some(std::time::Duration::from_secs(10)));
        Ok(())
    });
    let mut count = 0u32;
    loop {
        match rx.read_record(Some(Duration::from_secs(10))) {
            Ok(Some(v)) => {
                let bytes = rx.copy(&v)?;
                let len = 1 + (count as usize * 7919) % 10_000;
                assert_eq!(bytes, vec![count as u8; len]);
                rx.release(&v)?;
                count += 1;
            }
            Ok(None) => return Err("the stream stalled".into()),
            Err(RatsError::EndOfStream) => break,
            Err(e) => return Err(e.into()),
        }
    }
    sender.join().map_err(|_| "sender panicked")??;
    assert_eq!(count, 10_000);
    println!("{count} records in order");
    Ok(())
}
