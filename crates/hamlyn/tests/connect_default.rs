//! `Node::connect_default` follows `$HAMLYN_SOCKET`. Its own test binary with one test:
//! the environment is set before this process starts any thread of its own.

use hamlyn::{Error, Node, SOCKET_ENV};
use hamlyn_engine::{EngineConfig, EngineHandle};

#[test]
fn connect_default_connects_where_hamlyn_socket_says() {
    let path = std::env::temp_dir().join(format!("hamlyn-default-{}.sock", std::process::id()));
    std::env::set_var(SOCKET_ENV, &path);
    assert_eq!(hamlyn::default_socket_path(), path);
    match Node::connect_default() {
        Err(Error::Connect { path: tried, .. }) => assert_eq!(tried, path.display().to_string()),
        other => panic!("nothing listens at {}: {other:?}", path.display()),
    }
    let engine = EngineHandle::start(EngineConfig::daemon(&path)).expect("engine");
    let node = Node::connect_default().expect("connect_default");
    assert_eq!(node.socket_path(), path);
    drop(node);
    drop(engine);
}
