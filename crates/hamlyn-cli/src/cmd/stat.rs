//! `hamlyn stat`: a running engine's counters, as raw JSON or as tables.

use std::fmt::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use comfy_table::{presets, CellAlignment, Table};

use crate::control::{fetch_stats, ControlError};
use crate::json::{self, JsonError, Value};
use crate::socket::{DEFAULT_SOCKET, SOCKET_ENV};

/// `hamlyn stat` arguments.
#[derive(Debug, Args)]
pub struct StatArgs {
    /// The engine's control socket.
    #[arg(long, value_name = "PATH", env = SOCKET_ENV, default_value = DEFAULT_SOCKET)]
    pub socket: PathBuf,
    /// Print the engine's JSON as it sent it.
    #[arg(long)]
    pub json: bool,
    /// Longest wait for the engine's answer, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 5000)]
    pub timeout_ms: u64,
}

/// Why `hamlyn stat` failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StatError {
    /// The engine could not be asked.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// Its answer is not JSON.
    #[error("the engine's counters are not valid JSON: {0}")]
    Json(#[from] JsonError),
    /// Its answer lacks something every engine reports.
    #[error("the engine's counters lack {0}")]
    Missing(&'static str),
}

/// Fetches and prints the counters.
pub fn run(args: StatArgs) -> Result<(), StatError> {
    let text = fetch_stats(&args.socket, Duration::from_millis(args.timeout_ms.max(1)))?;
    if args.json {
        println!("{text}");
        return Ok(());
    }
    let v = json::parse(&text)?;
    print!("{}", render(&v)?);
    Ok(())
}

fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_style(presets::ASCII_MARKDOWN);
    t.set_header(header.to_vec());
    t
}

/// Right-aligns every column from `first` on (the numeric ones).
fn align_numbers(t: &mut Table, first: usize) {
    for c in t.column_iter_mut().skip(first) {
        c.set_cell_alignment(CellAlignment::Right);
    }
}

fn num(v: &Value, key: &str) -> String {
    match v.get(key) {
        Some(Value::Number(n)) if n.fract() == 0.0 => format!("{n:.0}"),
        Some(Value::Number(n)) => format!("{n}"),
        Some(Value::Bool(b)) => b.to_string(),
        Some(Value::String(s)) => s.clone(),
        _ => "-".into(),
    }
}

/// `reason=n, ...` for a rejects object (`-` when empty).
fn rejects(v: Option<&Value>) -> String {
    let parts: Vec<String> = v
        .and_then(Value::as_object)
        .unwrap_or(&[])
        .iter()
        .map(|(k, n)| format!("{k}={}", n.as_u64().unwrap_or(0)))
        .collect();
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(", ")
    }
}

/// The readable summary of an engine's counters.
pub fn render(v: &Value) -> Result<String, StatError> {
    let node = v.get("node").ok_or(StatError::Missing("node"))?;
    let inc = v
        .get("incarnation")
        .ok_or(StatError::Missing("incarnation"))?;
    let empty = Value::Object(Vec::new());
    let engine = v.get("engine").unwrap_or(&empty);
    let iface = v.get("interface").unwrap_or(&empty);
    let ports = v.get("ports").and_then(Value::as_array).unwrap_or(&[]);
    let slots = v.get("slots").and_then(Value::as_array).unwrap_or(&[]);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "node {}, incarnation {}: {} port(s), {} area(s), {} slot(s)\n",
        node.as_u64().map_or("?".into(), |n| n.to_string()),
        inc.as_u64().map_or("?".into(), |n| n.to_string()),
        ports.len(),
        num(v, "areas"),
        slots.len()
    );

    let mut totals = table(&["counter", "value"]);
    for (label, src, key) in [
        ("messages delivered", iface, "messages"),
        ("packets delivered", iface, "packets"),
        ("bytes delivered", iface, "bytes"),
        ("notifications posted", iface, "notifications"),
        ("requests taken", engine, "requests"),
        ("requests completed", engine, "completed"),
        ("bad requests", engine, "bad_requests"),
        ("error completions", engine, "error_completions"),
        ("queue overflows", engine, "queue_overflows"),
        ("orphan notifications", engine, "orphan_notifications"),
        ("corrupt rings", engine, "corrupt_rings"),
        ("bad control messages", engine, "bad_control"),
        ("clients attached (ever)", engine, "attaches"),
        ("clients lost", engine, "clients_lost"),
        ("engine sleeps", engine, "sleeps"),
    ] {
        totals.add_row(vec![label.to_string(), num(src, key)]);
    }
    align_numbers(&mut totals, 1);
    let _ = writeln!(out, "Totals\n{totals}\n");

    let mut rej = table(&["reason", "rejects"]);
    for (reason, n) in iface
        .get("rejects")
        .and_then(Value::as_object)
        .unwrap_or(&[])
    {
        rej.add_row(vec![reason.clone(), n.as_u64().unwrap_or(0).to_string()]);
    }
    if rej.row_count() == 0 {
        let _ = writeln!(out, "Rejects by reason: none\n");
    } else {
        align_numbers(&mut rej, 1);
        let _ = writeln!(out, "Rejects by reason\n{rej}\n");
    }

    let mut pt = table(&[
        "client",
        "pid",
        "termini open",
        "termini broken",
        "queues",
        "queue overflows",
    ]);
    for p in ports {
        pt.add_row(vec![
            num(p, "client"),
            num(p, "pid"),
            format!("{}/{}", num(p, "termini_open"), num(p, "termini")),
            num(p, "termini_broken"),
            num(p, "queues"),
            num(p, "queue_overflows"),
        ]);
    }
    if ports.is_empty() {
        let _ = writeln!(out, "Ports: none attached\n");
    } else {
        align_numbers(&mut pt, 0);
        let _ = writeln!(out, "Ports\n{pt}\n");
    }

    let mut st = table(&[
        "slot", "owner", "mode", "len", "state", "packets", "bytes", "messages", "rejects",
    ]);
    for s in slots {
        let mut state = Vec::new();
        if s.get("revoked") == Some(&Value::Bool(true)) {
            state.push("revoked");
        }
        if s.get("inhibited") == Some(&Value::Bool(true)) {
            state.push("inhibited");
        }
        st.add_row(vec![
            num(s, "slot"),
            num(s, "owner"),
            s.get("mode")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_string(),
            num(s, "len"),
            if state.is_empty() {
                "ok".into()
            } else {
                state.join(", ")
            },
            num(s, "packets"),
            num(s, "bytes"),
            num(s, "messages"),
            rejects(s.get("rejects")),
        ]);
    }
    if slots.is_empty() {
        let _ = writeln!(out, "Slots: none");
    } else {
        for i in [0, 1, 3, 5, 6, 7] {
            if let Some(c) = st.column_mut(i) {
                c.set_cell_alignment(CellAlignment::Right);
            }
        }
        let _ = writeln!(out, "Slots\n{st}");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_an_engines_counters() {
        let text = r#"{"node":3,"incarnation":77,"engine":{"attaches":2,"clients_lost":0,"requests":10,"bad_requests":0,"completed":10,"error_completions":1,"packets":9,"bytes":4096,"notifications":9,"queue_overflows":0,"orphan_notifications":0,"corrupt_rings":0,"bad_control":0,"sleeps":5},"interface":{"packets":9,"bytes":4096,"messages":9,"notifications":9,"rejects":{"bad_key":1}},"ports":[{"client":1,"pid":4242,"termini":4,"termini_open":1,"termini_broken":0,"queues":4,"queue_overflows":0}],"areas":3,"slots":[{"slot":1,"owner":1,"mode":"normal","len":4096,"revoked":false,"inhibited":true,"packets":9,"bytes":4096,"messages":9,"rejects":{"bad_key":1,"out_of_bounds":2}}]}"#;
        let out = render(&json::parse(text).unwrap()).unwrap();
        assert!(out.starts_with("node 3, incarnation 77: 1 port(s), 3 area(s), 1 slot(s)"));
        for want in [
            "4242",
            "1/4",
            "bad_key=1, out_of_bounds=2",
            "inhibited",
            "| bad_key",
            "engine sleeps",
        ] {
            assert!(out.contains(want), "{want:?} missing from\n{out}");
        }
        assert!(matches!(
            render(&json::parse("{}").unwrap()),
            Err(StatError::Missing("node"))
        ));
    }
}
