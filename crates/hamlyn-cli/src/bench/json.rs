//! The `--json FILE` report:
//!
//! ```text
//! {"floor": {"shm_pingpong_oneway_us": F, "shm_pingpong_oneway_us_runs": [F, F],
//!            "shm_relay_pingpong_oneway_us": F, "memcpy_gbps": {"4096": F, ...}},
//!  "results": [{"mode": "mediated", "op": "tagged_write" | "bandwidth" | "msg_rate",
//!               "size": N, "p50_us": F, "p99_us": F, "gbps": F, "msgs_per_s": F}, ...]}
//! ```
//!
//! Fields that do not apply to a result are `null`; `gbps` is 10^9 bytes per second. The
//! floor's ping-pong is the lower of the runs before the engine started and after it
//! stopped. (The loopback latency rows of the table are not part of this report.)

use super::report::Report;
use crate::json::{write_num, write_str};

/// The report as JSON text (one result per line, for people reading the file too).
pub fn to_json(r: &Report) -> String {
    let mut o = String::with_capacity(2048);
    o.push_str("{\"floor\": {\"shm_pingpong_oneway_us\": ");
    write_num(&mut o, Some(r.floor.shm_oneway_us));
    o.push_str(", \"shm_pingpong_oneway_us_runs\": [");
    for (i, v) in r.floor.shm_runs_us.iter().enumerate() {
        if i > 0 {
            o.push_str(", ");
        }
        write_num(&mut o, Some(*v));
    }
    o.push_str("], \"shm_relay_pingpong_oneway_us\": ");
    write_num(&mut o, Some(r.floor.shm_relay_oneway_us));
    o.push_str(", \"memcpy_gbps\": {");
    for (i, (size, g)) in r.floor.memcpy_gbps.iter().enumerate() {
        if i > 0 {
            o.push_str(", ");
        }
        write_str(&mut o, &size.to_string());
        o.push_str(": ");
        write_num(&mut o, Some(*g));
    }
    o.push_str("}},\n \"results\": [");
    for (i, row) in r.rows.iter().enumerate() {
        o.push_str(if i > 0 { ",\n  " } else { "\n  " });
        o.push_str("{\"mode\": \"mediated\", \"op\": ");
        write_str(&mut o, row.op.name());
        o.push_str(&format!(", \"size\": {}", row.size));
        for (key, v) in [
            ("p50_us", row.p50_us),
            ("p99_us", row.p99_us),
            ("gbps", row.gbps),
            ("msgs_per_s", row.msgs_per_s),
        ] {
            o.push_str(", ");
            write_str(&mut o, key);
            o.push_str(": ");
            write_num(&mut o, v);
        }
        o.push('}');
    }
    o.push_str("\n]}\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::report::{Floor, Row};
    use crate::json::{parse, Value};

    #[test]
    fn report_json_parses_with_the_documented_keys() {
        let r = Report {
            setup: "test".into(),
            floor: Floor {
                shm_oneway_us: 0.13,
                shm_runs_us: vec![0.13, 0.2],
                shm_relay_oneway_us: 4.5,
                memcpy_gbps: vec![(4096, 20.5), (1 << 20, 9.25)],
            },
            rows: vec![
                Row::latency(8, 1.5, 3.0),
                Row::bandwidth(1 << 20, 7.5),
                Row::rate(8, 2.0e6),
            ],
            loopback: vec![Row::latency(8, 1.0, 2.0)],
        };
        let v = parse(&to_json(&r)).unwrap();
        let top: Vec<&str> = v
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(top, ["floor", "results"]);
        let floor = v.get("floor").unwrap();
        assert_eq!(
            floor.get("shm_pingpong_oneway_us").unwrap().as_f64(),
            Some(0.13)
        );
        assert_eq!(
            floor.get("shm_relay_pingpong_oneway_us").unwrap().as_f64(),
            Some(4.5)
        );
        let runs = floor.get("shm_pingpong_oneway_us_runs").unwrap();
        assert_eq!(runs.as_array().unwrap().len(), 2);
        let m = floor.get("memcpy_gbps").unwrap();
        assert_eq!(m.get("4096").unwrap().as_f64(), Some(20.5));
        assert_eq!(m.get("1048576").unwrap().as_f64(), Some(9.25));
        let res = v.get("results").unwrap().as_array().unwrap();
        assert_eq!(res.len(), 3);
        for row in res {
            let keys: Vec<&str> = row
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, _)| k.as_str())
                .collect();
            assert_eq!(
                keys,
                [
                    "mode",
                    "op",
                    "size",
                    "p50_us",
                    "p99_us",
                    "gbps",
                    "msgs_per_s"
                ]
            );
            assert_eq!(row.get("mode").unwrap().as_str(), Some("mediated"));
        }
        assert_eq!(res[0].get("op").unwrap().as_str(), Some("tagged_write"));
        assert_eq!(res[0].get("p99_us").unwrap().as_f64(), Some(3.0));
        assert_eq!(res[0].get("gbps"), Some(&Value::Null));
        assert_eq!(res[1].get("size").unwrap().as_u64(), Some(1 << 20));
        assert_eq!(res[1].get("gbps").unwrap().as_f64(), Some(7.5));
        assert_eq!(res[1].get("p50_us"), Some(&Value::Null));
        assert_eq!(res[2].get("msgs_per_s").unwrap().as_f64(), Some(2.0e6));
    }
}
