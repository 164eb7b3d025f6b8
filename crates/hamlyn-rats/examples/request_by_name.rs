//! A server publishes its request/response seed under a name in the cluster's registry;
//! a client finds it by that name, with no resources set aside for it at the server.
//!
//! `cargo run -p hamlyn-rats --example request_by_name`

use std::time::Duration;

use hamlyn::Node;
use hamlyn_rats::request_response::{RequestClient, RequestServer};
use hamlyn_rats::{Manager, RatsError};

/// Three requests to an upper-casing server found as "upper".
pub fn main() -> Result<(), Box<dyn std::error::Error>> {
    let node = Node::embedded()?;
    let server_node = Node::connect(node.socket_path())?;
    let (published_tx, published_rx) = std::sync::mpsc::channel();
    let server = std::thread::spawn(move || -> Result<(), RatsError> {
        let m = Manager::new(&server_node)?;
        let mut s = RequestServer::new(&m, 4096)?;
        s.publish("upper")?;
        let _ = published_tx.send(());
        for _ in 0..3 {
            let r = s
                .recv(Some(Duration::from_secs(10)))?
                .ok_or(RatsError::Timeout)?;
            let reply = s.to_vec(&r)?.to_ascii_uppercase();
            s.send_reply(&r, &reply)?
                .wait(Some(Duration::from_secs(10)));
            s.release()?;
        }
        Ok(())
    });
    published_rx.recv_timeout(Duration::from_secs(10))?;
    let m = Manager::new(&node)?;
    let mut c = RequestClient::lookup(&m, "upper", 4096)?;
    for word in ["hamlyn", "rats", "seeds"] {
        let r = c.call(word.as_bytes(), Duration::from_secs(10))?;
        let got = c.reply_bytes(&r)?;
        c.release();
        assert_eq!(got, word.to_ascii_uppercase().as_bytes());
        println!("{word} -> {}", String::from_utf8_lossy(&got));
    }
    server.join().map_err(|_| "server panicked")??;
    Ok(())
}
