//! The plots of `--plot DIR`: which figures of a [`Report`] go into which plot (drawing
//! is [`super::plot`]'s).
//!
//! - `latency.svg`: one-way p50 of the tagged write against size, one line per mode, with
//!   raw TCP and the peers' tagged and active-message latencies;
//! - `latency-polled.svg`: the write polled on its data, one line per mode, with UCX
//!   `put_lat` (the same measurement);
//! - `latency-MODE.svg`: every operation of one mode;
//! - `bandwidth.svg`: streaming bandwidth against size, one line per mode, with memcpy,
//!   one raw TCP stream and the peers' `put_bw` and `tag_bw`;
//!
//! (those four with the interface's rows), and with the layers' rows:
//!
//! - `endpoints.svg`: one-way p50 through FLIPC endpoints against size, direct and
//!   mediated, with FLIPC's own shape (15.45 µs + 6.25 ns/B) and UCX `am_lat`;
//! - `am-bulk.svg`: active-message bulk bandwidth against size, mediated and over TCP,
//!   with seed 003's 106 MB/s and UCX `am_bw`.

use std::path::{Path, PathBuf};

use super::error::BenchError;
use super::layers::{flipc_shape_us, Layer, LayerOp};
use super::plot::{write_svg, Plot, Series};
use super::report::{Mode, Op, Report};

/// Writes every plot of `report` into `dir` (created if missing); returns the files.
pub fn write(dir: &Path, report: &Report) -> Result<Vec<PathBuf>, BenchError> {
    std::fs::create_dir_all(dir).map_err(|source| BenchError::Write {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut files = Vec::new();
    let mut put = |name: &str, title: &str, y_label: &str, series: Vec<Series>| {
        let path = dir.join(name);
        write_svg(
            &path,
            &Plot {
                title,
                y_label,
                series: &series,
            },
        )?;
        files.push(path);
        Ok::<(), BenchError>(())
    };
    layer_plots(report, &mut put)?;
    if report.rows.is_empty() {
        return Ok(files);
    }
    let modes = |op: Op| -> Vec<Series> {
        Mode::ALL
            .iter()
            .map(|&m| Series {
                label: format!("Hamlyn {}", m.name()),
                points: p50s(report, m, op),
            })
            .collect()
    };

    let mut tagged = modes(Op::TaggedWrite);
    if let Some(tcp) = &report.floor.tcp {
        tagged.push(Series {
            label: "raw TCP".into(),
            points: tcp
                .pingpong_us
                .iter()
                .map(|&(s, p50, _)| (s, p50))
                .collect(),
        });
    }
    tagged.extend(peer_series(
        report,
        &["tag_lat", "am_lat", "pingpong"],
        Figure::Latency,
    ));
    put(
        "latency.svg",
        "One-way latency of a tagged write with notification (p50)",
        "µs",
        tagged,
    )?;

    let mut polled = modes(Op::PolledWrite);
    polled.extend(peer_series(report, &["put_lat"], Figure::Latency));
    put(
        "latency-polled.svg",
        "One-way latency of a write polled on its data (p50)",
        "µs",
        polled,
    )?;

    for mode in Mode::ALL {
        let series: Vec<Series> = Op::LATENCY
            .iter()
            .map(|&op| Series {
                label: op.label().to_string(),
                points: p50s(report, mode, op),
            })
            .collect();
        if series.iter().all(|s| s.points.is_empty()) {
            continue;
        }
        put(
            &format!("latency-{}.svg", mode.name()),
            &format!(
                "Latency of every operation, {} (p50; reads and atomics: RTT)",
                mode.name()
            ),
            "µs",
            series,
        )?;
    }

    let mut bw: Vec<Series> = Mode::ALL
        .iter()
        .map(|&m| Series {
            label: format!("Hamlyn {}", m.name()),
            points: report
                .rows
                .iter()
                .filter(|r| r.mode == m && r.op == Op::Bandwidth)
                .filter_map(|r| Some((r.size, r.gbps?)))
                .collect(),
        })
        .collect();
    bw.push(Series {
        label: "memcpy".into(),
        points: report.floor.memcpy_gbps.clone(),
    });
    if let Some(tcp) = &report.floor.tcp {
        bw.push(Series {
            label: "raw TCP stream".into(),
            points: tcp.stream_gbps.clone(),
        });
    }
    bw.extend(peer_series(
        report,
        &["put_bw", "tag_bw", "throughput"],
        Figure::Bandwidth,
    ));
    put(
        "bandwidth.svg",
        "Streaming bandwidth, one sender",
        "GB/s",
        bw,
    )?;
    Ok(files)
}

/// The layers' plots, when their rows were measured.
fn layer_plots(
    report: &Report,
    put: &mut impl FnMut(&str, &str, &str, Vec<Series>) -> Result<(), BenchError>,
) -> Result<(), BenchError> {
    let layer_series = |layer: Layer, op: LayerOp, what: &str, f: fn(f64, f64) -> f64| {
        Mode::ALL
            .iter()
            .map(|&m| Series {
                label: format!("Hamlyn {what} {}", m.name()),
                points: report
                    .layers
                    .iter()
                    .filter(|r| r.layer == layer && r.mode == m && r.op == op)
                    .map(|r| {
                        (
                            r.size,
                            f(r.p50_us.unwrap_or(f64::NAN), r.gbps.unwrap_or(f64::NAN)),
                        )
                    })
                    .filter(|(_, v)| v.is_finite())
                    .collect(),
            })
            .filter(|s| !s.points.is_empty())
            .collect::<Vec<Series>>()
    };
    let ucx = |test: &str, figure: Figure| -> Vec<Series> {
        let Some(peers) = &report.layer_peers else {
            return Vec::new();
        };
        let mut out: Vec<Series> = Vec::new();
        for r in peers.results.iter().filter(|r| r.test == test) {
            let Some(v) = (match figure {
                Figure::Latency => r.p50_us,
                Figure::Bandwidth => r.gbps,
            }) else {
                continue;
            };
            let label = format!("{} {}", r.kind.name(), r.test);
            match out.iter_mut().find(|s| s.label == label) {
                Some(s) => s.points.push((r.size, v)),
                None => out.push(Series {
                    label,
                    points: vec![(r.size, v)],
                }),
            }
        }
        out
    };
    let mut ep = layer_series(
        Layer::Endpoints,
        LayerOp::EndpointOneWay,
        "endpoints",
        |p50, _| p50,
    );
    if !ep.is_empty() {
        let sizes: Vec<usize> = ep[0].points.iter().map(|&(s, _)| s).collect();
        ep.push(Series {
            label: "FLIPC (seed 002): 15.45 µs + 6.25 ns/B".into(),
            points: sizes.iter().map(|&s| (s, flipc_shape_us(s))).collect(),
        });
        ep.extend(ucx("am_lat", Figure::Latency));
        put(
            "endpoints.svg",
            "One-way latency of medium messages through FLIPC endpoints (p50)",
            "µs",
            ep,
        )?;
    }
    let mut bulk = layer_series(Layer::Am, LayerOp::AmBulkBandwidth, "AM bulk", |_, gbps| {
        gbps
    });
    if !bulk.is_empty() {
        let sizes: Vec<usize> = bulk[0].points.iter().map(|&(s, _)| s).collect();
        bulk.push(Series {
            label: "GRIM (seed 003) peak: 106 MB/s".into(),
            points: sizes.iter().map(|&s| (s, 0.106)).collect(),
        });
        bulk.extend(ucx("am_bw", Figure::Bandwidth));
        put(
            "am-bulk.svg",
            "Active messages: bulk bandwidth, one sender",
            "GB/s",
            bulk,
        )?;
    }
    Ok(())
}

/// (size, p50) of every row of `mode` and `op`.
fn p50s(report: &Report, mode: Mode, op: Op) -> Vec<(usize, f64)> {
    report
        .rows
        .iter()
        .filter(|r| r.mode == mode && r.op == op)
        .filter_map(|r| Some((r.size, r.p50_us?)))
        .collect()
}

/// Which figure of a peer's result a plot shows.
#[derive(Clone, Copy)]
enum Figure {
    Latency,
    Bandwidth,
}

/// One series per peer and test among `tests`, of the figure asked.
fn peer_series(report: &Report, tests: &[&str], figure: Figure) -> Vec<Series> {
    let Some(peers) = &report.peers else {
        return Vec::new();
    };
    let mut out: Vec<Series> = Vec::new();
    for r in &peers.results {
        if !tests.contains(&r.test) {
            continue;
        }
        let value = match figure {
            Figure::Latency => r.p50_us,
            Figure::Bandwidth => r.gbps,
        };
        let Some(v) = value else { continue };
        let label = format!("{} {}", r.kind.name(), r.test);
        match out.iter_mut().find(|s| s.label == label) {
            Some(s) => s.points.push((r.size, v)),
            None => out.push(Series {
                label,
                points: vec![(r.size, v)],
            }),
        }
    }
    out
}
