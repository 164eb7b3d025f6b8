//! The active-message part of `hamlyn stat` (issue 12): the cluster's handler table as
//! the registry node holds it (id, name, live, epoch, fingerprint), the calls this
//! engine's resident handlers answered (asked of `hamlyn.stats` itself), and per handler
//! the calls, replies, errors and refusals this engine's client processes reported
//! (`hamlyn_am::AmEndpoint::report_counters`, summed by name).

use std::fmt::Write;
use std::path::Path;
use std::time::Duration;

use comfy_table::{presets, CellAlignment, Table};
use hamlyn_wire::control::{am_engine, AmCounts, AmHandlerEntry, Reply, Request};

use crate::control::{Control, ControlError};

/// The handler table, this engine's resident handlers' calls, its clients' counters.
type Fetched = (Vec<AmHandlerEntry>, [u64; 4], Vec<(String, AmCounts)>);

/// The handler table, page by page, and this engine's resident handlers' calls.
fn fetch(socket: &Path, timeout: Duration, node: u32) -> Result<Fetched, ControlError> {
    let mut control = Control::connect(socket, timeout)?;
    let mut all = Vec::new();
    let mut start = 0;
    loop {
        match control.call(&Request::AmTable { start })? {
            Reply::AmTable { entries, next, .. } => {
                all.extend(entries);
                match next {
                    Some(n) if n > start => start = n,
                    Some(_) => return Err(ControlError::Unexpected),
                    None => break,
                }
            }
            _ => return Err(ControlError::Unexpected),
        }
    }
    let calls = match control.call(&Request::AmCall {
        node,
        handler: am_engine::STATS,
        args: [0; 4],
    })? {
        Reply::AmReply { args } => args,
        _ => return Err(ControlError::Unexpected),
    };
    let reported = match control.call(&Request::AmCounters)? {
        Reply::AmCounters { handlers } => handlers,
        _ => return Err(ControlError::Unexpected),
    };
    Ok((all, calls, reported))
}

/// The section's text: a table, or why it could not be had.
pub fn render(socket: &Path, timeout: Duration, node: u32) -> String {
    let (entries, calls, reported) = match fetch(socket, timeout, node) {
        Ok(got) => got,
        Err(e) => return format!("\nActive-message handlers: not available: {e}\n"),
    };
    let mut t = Table::new();
    t.load_style(presets::ASCII_MARKDOWN);
    t.set_header(vec![
        "id",
        "name",
        "live",
        "epoch",
        "fingerprint",
        "calls answered by this engine",
        "calls here",
        "replies here",
        "errors here",
        "refused here",
    ]);
    for e in &entries {
        let answered = calls
            .get(e.id as usize)
            .filter(|_| (e.id as usize) < am_engine::NAMES.len())
            .map_or_else(|| "-".to_owned(), u64::to_string);
        let here = reported
            .iter()
            .find(|(n, _)| *n == e.name)
            .map(|r| r.1)
            .unwrap_or_default();
        t.add_row(vec![
            e.id.to_string(),
            e.name.clone(),
            if e.live { "yes" } else { "no" }.to_owned(),
            e.epoch.to_string(),
            format!("{:#018x}", e.fingerprint),
            answered,
            here.calls.to_string(),
            here.replies.to_string(),
            here.errors.to_string(),
            here.refused.to_string(),
        ]);
    }
    for c in [0, 3, 5, 6, 7, 8, 9] {
        if let Some(col) = t.column_mut(c) {
            col.set_cell_alignment(CellAlignment::Right);
        }
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nActive-message handlers (\"here\": as this node's processes reported them)\n{t}\n"
    );
    out
}
