//! An engine's control socket appears at its path only once the engine listens: a
//! client that connects the moment it sees the path is never refused. (Bound at the
//! path directly, the file existed between `bind` and `listen`, and a Python test that
//! connected as soon as a daemon's socket appeared was refused once in CI; with that
//! code this test was refused within 500-1,000 of its 2,000 rounds.) Bounded: a fixed
//! number of engines, each path watched until it appears.

use std::time::{Duration, Instant};

use hamlyn_engine::{EngineConfig, EngineHandle};

#[test]
fn a_client_that_connects_as_soon_as_the_path_appears_is_accepted() {
    for round in 0..2000 {
        let cfg = EngineConfig::embedded();
        let path = cfg.socket.clone();
        let watcher = {
            let path = path.clone();
            std::thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(30);
                while !path.exists() {
                    assert!(Instant::now() < deadline, "the socket never appeared");
                    std::hint::spin_loop();
                }
                hamlyn_shm::fdpass::seqpacket_connect(&path).map(drop)
            })
        };
        let engine = EngineHandle::start(cfg).expect("engine");
        let connected = watcher.join().expect("watcher");
        assert!(
            connected.is_ok(),
            "round {round}: refused at a path that existed: {connected:?}"
        );
        drop(engine);
        assert!(
            !path.exists(),
            "the socket is removed when the engine stops"
        );
    }
}

#[test]
fn a_live_engines_socket_is_not_replaced() {
    let first = EngineHandle::start(EngineConfig::embedded()).expect("engine");
    let mut cfg = EngineConfig::embedded();
    cfg.socket = first.socket_path().to_path_buf();
    assert!(
        EngineHandle::start(cfg).is_err(),
        "a second engine at a live engine's socket fails to bind"
    );
    hamlyn_shm::fdpass::seqpacket_connect(first.socket_path()).expect("the first still answers");
    let dir = first.socket_path().parent().expect("dir").to_path_buf();
    // The second engine's temporary names are the socket's, dotted. (Names of this
    // process alone were not enough: the other test, in another thread, binds engines of
    // its own meanwhile, and CI once saw one of its temporary names here.)
    let socket_name = first
        .socket_path()
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    let leftovers: Vec<_> = std::fs::read_dir(dir)
        .expect("dir")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().contains(".binding"))
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!(".{socket_name}."))
        })
        .collect();
    assert!(
        leftovers.is_empty(),
        "no temporary name left behind: {leftovers:?}"
    );
}
