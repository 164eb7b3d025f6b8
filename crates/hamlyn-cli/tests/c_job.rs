//! A C program as the ranks of `hamlyn run -n 4` (issue 13 through the C API): the C
//! test program `crates/hamlyn-capi/tests/c/job.c`, built against the C library as
//! install.sh installs it (the library cargo built for this test: `hamlyn-capi` is a
//! dev-dependency), finds rank and size, all-gathers seeds and passes barriers.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::{run, text, TempDir};

fn capi_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../hamlyn-capi")
}

fn ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

#[test]
fn a_c_program_runs_as_the_ranks_of_hamlyn_run() {
    let dir = TempDir::new("c-job");
    let prefix = dir.path("prefix");
    // libhamlyn_capi.so is where cargo put this test's dependencies.
    let deps = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    ok(Command::new(capi_dir().join("install.sh"))
        .arg("--lib-dir")
        .arg(&deps)
        .arg(&prefix));
    let flags = ok(Command::new("pkg-config")
        .args(["--cflags", "--libs", "hamlyn"])
        .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig")));
    let exe = dir.path("job");
    ok(Command::new("cc")
        .args([
            "-std=c11",
            "-D_GNU_SOURCE",
            "-g",
            "-Wall",
            "-Wextra",
            "-Werror",
        ])
        .arg("-I")
        .arg(capi_dir().join("tests/c"))
        .arg(capi_dir().join("tests/c/job.c"))
        .args(flags.split_whitespace())
        // Found at run time without LD_LIBRARY_PATH: `hamlyn run` passes its own
        // environment on.
        .arg(format!("-Wl,-rpath,{}", prefix.join("lib").display()))
        .arg("-o")
        .arg(&exe));
    let rounds = dir.path("rounds-dir");
    std::fs::create_dir_all(&rounds).unwrap();
    let out = run(
        &[
            "run",
            "-n",
            "4",
            "--",
            exe.to_str().unwrap(),
            rounds.to_str().unwrap(),
        ],
        Duration::from_secs(300),
    );
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{stdout}{}",
        out.status,
        text(&out.stderr)
    );
    for r in 0..4 {
        assert!(
            stdout.contains(&format!("rank {r} of 4: ok")),
            "rank {r} did not finish: {stdout}"
        );
    }
}
