//! The test bed's own containerd (started by tests/testbed/up with `start_bg containerd`),
//! stopped and started again by the node fault suite with the same command line, log and
//! pid file, as tests/testbed/up started it: its own session, no descriptor but stdin,
//! stdout and stderr, output appended to `$BED/logs/containerd.log`.
//!
//! Stopping is SIGTERM (containerd's shutdown; the containers' shims go on running, as on
//! a `systemctl restart containerd`), then SIGKILL after 15 s.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use inplace_daemon::cri::CriError;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum ContainerdError {
    #[error("the bed's containerd pid file {0}: {1}")]
    PidFile(PathBuf, String),
    #[error("the bed's containerd (pid {0}) is not running")]
    NotRunning(u32),
    #[error("containerd (pid {0}) did not stop within 20 s")]
    DidNotStop(u32),
    #[error("starting containerd: {0}")]
    Start(std::io::Error),
    #[error("containerd did not answer on {0} within 30 s")]
    NoSocket(PathBuf),
}

/// The bed's containerd.
#[derive(Debug)]
pub struct BedContainerd {
    bed: PathBuf,
    /// The command line, read from the running process.
    argv: Vec<String>,
    /// The process this suite started (reaped when it is stopped).
    child: Option<std::process::Child>,
}

fn alive(pid: u32) -> bool {
    // A zombie (exited, not yet reaped by its parent) is not running.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().to_owned())
        })
        .is_some_and(|rest| !rest.starts_with('Z') && !rest.starts_with('X'))
}

impl BedContainerd {
    /// The containerd running for the bed at `bed` (INPLACE_TESTBED_DIR).
    pub fn find(bed: &Path) -> Result<BedContainerd, ContainerdError> {
        let pid = Self::pid_in(bed)?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map_err(|_| ContainerdError::NotRunning(pid))?;
        let argv: Vec<String> = cmdline
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if argv.is_empty() || !alive(pid) {
            return Err(ContainerdError::NotRunning(pid));
        }
        Ok(BedContainerd {
            bed: bed.to_path_buf(),
            argv,
            child: None,
        })
    }

    fn pid_file(bed: &Path) -> PathBuf {
        bed.join("pids/containerd.pid")
    }

    fn pid_in(bed: &Path) -> Result<u32, ContainerdError> {
        let f = Self::pid_file(bed);
        let text = std::fs::read_to_string(&f)
            .map_err(|e| ContainerdError::PidFile(f.clone(), e.to_string()))?;
        text.trim()
            .parse()
            .map_err(|_| ContainerdError::PidFile(f, format!("not a pid: {text:?}")))
    }

    pub fn socket(&self) -> PathBuf {
        self.bed.join("containerd/containerd.sock")
    }

    /// Stops containerd (TERM, then KILL after 15 s) and waits until it is gone.
    pub fn stop(&mut self) -> Result<(), ContainerdError> {
        let pid = Self::pid_in(&self.bed)?;
        let signal = |sig: &str| {
            let _ = Command::new("kill")
                .args([sig, &pid.to_string()])
                .stderr(Stdio::null())
                .status();
        };
        signal("-TERM");
        let t0 = Instant::now();
        while alive(pid) {
            if t0.elapsed() > Duration::from_secs(15) {
                signal("-KILL");
            }
            if t0.elapsed() > Duration::from_secs(20) {
                return Err(ContainerdError::DidNotStop(pid));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.wait();
        }
        Ok(())
    }

    /// Starts containerd with the command line it had, and waits until its socket answers.
    pub fn start(&mut self) -> Result<(), ContainerdError> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.bed.join("logs/containerd.log"))
            .map_err(ContainerdError::Start)?;
        let err = log.try_clone().map_err(ContainerdError::Start)?;
        // As start_bg does: every descriptor above 2 closed (a caller's lock must not be
        // held by containerd for as long as it runs), its own session; `setsid` and `exec`
        // run in place (this child is no group leader), so the pid is containerd's.
        let child = Command::new("setsid")
            .args([
                "bash",
                "-c",
                r#"for fd in /proc/self/fd/*; do fd=${fd##*/}; [ "$fd" -gt 2 ] && eval "exec $fd>&-"; done; exec "$@""#,
                "start_bg",
            ])
            .args(&self.argv)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(ContainerdError::Start)?;
        let pid_file = Self::pid_file(&self.bed);
        std::fs::write(&pid_file, format!("{}\n", child.id()))
            .map_err(|e| ContainerdError::PidFile(pid_file, e.to_string()))?;
        self.child = Some(child);
        let socket = self.socket();
        let t0 = Instant::now();
        while std::os::unix::net::UnixStream::connect(&socket).is_err() {
            if t0.elapsed() > Duration::from_secs(30) {
                return Err(ContainerdError::NoSocket(socket));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    /// Whether the containerd of the pid file runs.
    pub fn running(&self) -> bool {
        Self::pid_in(&self.bed).is_ok_and(alive)
    }
}

/// Whether a CRI call failed because containerd is not serving yet, so that the same read
/// asked again later answers: the socket gone or cut (a restart under way), or answered
/// while its CRI plugin is still loading ("server is not initialized yet": containerd's
/// socket answers before the plugin is up). The checker's reads of containerd wait on
/// these; any other error is an answer.
pub fn not_serving_yet(e: &CriError) -> bool {
    e.outcome_unknown()
        || (e.code() == Some(tonic::Code::Unknown)
            && e.runtime_message().contains("not initialized"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rpc(code: tonic::Code, message: &str) -> CriError {
        CriError::Rpc {
            op: "ImageStatus",
            status: tonic::Status::new(code, message),
        }
    }

    #[test]
    fn only_a_runtime_that_is_not_serving_yet_is_asked_again() {
        let cases = [
            (
                rpc(tonic::Code::Unknown, "server is not initialized yet"),
                true,
            ),
            (rpc(tonic::Code::Unavailable, "connection refused"), true),
            (
                CriError::Timeout {
                    op: "ListContainers",
                    after: Duration::from_secs(10),
                },
                true,
            ),
            (rpc(tonic::Code::Unknown, "failed to get image"), false),
            (rpc(tonic::Code::NotFound, "not initialized"), false),
            (rpc(tonic::Code::InvalidArgument, "bad reference"), false),
        ];
        for (e, want) in cases {
            assert_eq!(not_serving_yet(&e), want, "{e}");
        }
    }
}
