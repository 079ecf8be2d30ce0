//! Runs the built `toolgate` binary the way a script does: arguments,
//! bytes on stdin, exit code and both streams back.

#![allow(dead_code, reason = "each test binary uses part of the support")]

use std::io::Write;
use std::process::{Command, Stdio};

/// What one run printed and how it exited.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

pub fn toolgate(args: &[&str], stdin: &[u8]) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn toolgate");
    // The command may stop reading early (byte limit); a broken pipe is fine.
    let _ = child.stdin.take().expect("stdin").write_all(stdin);
    let out = child.wait_with_output().expect("wait");
    Run {
        code: out.status.code().expect("exit code"),
        stdout: String::from_utf8(out.stdout).expect("UTF-8 stdout"),
        stderr: String::from_utf8(out.stderr).expect("UTF-8 stderr"),
    }
}

/// Runs `toolgate args` with `env` set and `TOOLGATE_DB_URL`,
/// `APP_DB_URL` and `RUST_LOG` removed unless `env` sets them: the caller's
/// shell must not change what a test sees.
pub fn toolgate_env(args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolgate"));
    cmd.args(args)
        .env_remove("TOOLGATE_DB_URL")
        .env_remove("APP_DB_URL")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run toolgate");
    Run {
        code: out.status.code().expect("exit code"),
        stdout: String::from_utf8(out.stdout).expect("UTF-8 stdout"),
        stderr: String::from_utf8(out.stderr).expect("UTF-8 stderr"),
    }
}
