//! The examples a newcomer runs, run here as tests (each example's `main`).

#[path = "../examples/ping_pong.rs"]
mod ping_pong;
#[path = "../examples/request_by_name.rs"]
mod request_by_name;
#[path = "../examples/stream_of_records.rs"]
mod stream_of_records;

#[test]
fn ping_pong_example_runs() {
    ping_pong::main().expect("ping_pong");
}

#[test]
fn stream_of_records_example_runs() {
    stream_of_records::main().expect("stream_of_records");
}

#[test]
fn request_by_name_example_runs() {
    request_by_name::main().expect("request_by_name");
}
