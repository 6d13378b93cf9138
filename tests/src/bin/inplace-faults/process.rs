//! The processes under test (the controller, the node daemon): started, SIGKILLed and
//! restarted by the runner, and restarted when they exit by themselves, as a kubelet
//! restarts a crashed container.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result};

#[derive(Debug)]
pub struct Process {
    child: Option<Child>,
    bin: PathBuf,
    args: Vec<OsString>,
    env: Vec<(String, OsString)>,
    log: PathBuf,
}

impl Process {
    /// Starts `bin` with `args` and `env`, its output appended to `log`.
    pub fn start(
        bin: &Path,
        args: Vec<OsString>,
        env: Vec<(String, OsString)>,
        log: &Path,
    ) -> Result<Self> {
        let mut p = Process {
            child: None,
            bin: bin.to_owned(),
            args,
            env,
            log: log.to_owned(),
        };
        p.spawn()?;
        Ok(p)
    }

    /// A controller scoped to `ns`, reaching the API server through `kubeconfig`, with
    /// every controller a namespaced controller runs: the CloneSet, ImagePullJob and
    /// ContainerRecreateRequest controllers (the NodeImage lifecycle needs every namespace),
    /// and pre-download on, so that ImagePullJobs are made and deleted under the faults too.
    pub fn controller(
        bin: &Path,
        kubeconfig: &Path,
        ns: &str,
        log: &Path,
        rust_log: &str,
    ) -> Result<Self> {
        let args: Vec<OsString> = [
            "--kubeconfig".into(),
            kubeconfig.as_os_str().to_owned(),
            "--namespace".into(),
            ns.into(),
            "--metrics-addr".into(),
            "127.0.0.1:0".into(),
            "--leader-elect".into(),
            "false".into(),
            "--feature-gates".into(),
            "PreDownloadImageForInPlaceUpdate=true".into(),
        ]
        .into();
        Self::start(bin, args, vec![("RUST_LOG".into(), rust_log.into())], log)
    }

    pub fn spawn(&mut self) -> Result<()> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("{}", self.log.display()))?;
        let child = Command::new(&self.bin)
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .with_context(|| format!("starting {}", self.bin.display()))?;
        self.child = Some(child);
        Ok(())
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// When the process exited on its own: restarts it, as the kubelet restarts a
    /// crashed container (after 1 s instead of the kubelet's 10 s back-off, to keep runs
    /// short), and returns the exit status with the log's last error line.
    pub fn revive(&mut self) -> Result<Option<String>> {
        let Some(c) = self.child.as_mut() else {
            return Ok(None);
        };
        let status = match c.try_wait() {
            Ok(Some(status)) => status,
            _ => return Ok(None),
        };
        self.child = None;
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let why = text
            .lines()
            .rev()
            .find(|l| l.starts_with("Error") || l.contains(" ERROR "))
            .unwrap_or("")
            .to_owned();
        std::thread::sleep(Duration::from_secs(1));
        self.spawn()?;
        Ok(Some(format!("{status}: {why}")))
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}
