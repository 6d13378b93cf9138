//! The controller child process.

use super::*;

#[derive(Debug)]
pub(super) struct Controller {
    pub(super) child: Option<Child>,
    pub(super) pid: u32,
    pub(super) log: PathBuf,
    pub(super) started: Instant,
}

impl Controller {
    pub(super) fn start(args: &Args, ns: &str, tag: &str) -> Result<Controller> {
        Self::start_with(args, ns, tag, &[])
    }

    /// [`Controller::start`] with more flags after `--controller-arg`s.
    pub(super) fn start_with(
        args: &Args,
        ns: &str,
        tag: &str,
        extra: &[&str],
    ) -> Result<Controller> {
        let log = std::env::temp_dir().join(format!("inplace-rollout-bench-{ns}-{tag}.log"));
        let file = std::fs::File::create(&log).with_context(|| format!("{}", log.display()))?;
        let kubeconfig = inplace_tests::bed::kubeconfig_path()?;
        let started = Instant::now();
        let child = Command::new(&args.controller_bin)
            .args(["--kubeconfig", &kubeconfig, "--namespace", ns])
            .args(["--metrics-addr", "127.0.0.1:0", "--leader-elect", "false"])
            .args(&args.controller_args)
            .args(extra)
            .env("RUST_LOG", &args.controller_log)
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .with_context(|| format!("starting {}", args.controller_bin.display()))?;
        let pid = child.id();
        progress(format!(
            "controller pid {pid} for namespace {ns}, log {}",
            log.display()
        ));
        Ok(Controller {
            child: Some(child),
            pid,
            log,
            started,
        })
    }

    pub(super) fn usage(&self) -> Option<Usage> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)).ok()?;
        Usage::parse(&status, &stat)
    }

    /// Fails (with the log's tail) when the process has exited.
    pub(super) fn check_alive(&mut self) -> Result<()> {
        let Some(child) = self.child.as_mut() else {
            bail!("the controller is not running");
        };
        if let Some(status) = child.try_wait()? {
            self.child = None;
            bail!(
                "the controller exited ({status}); log {}:\n{}",
                self.log.display(),
                self.tail(40)
            );
        }
        Ok(())
    }

    pub(super) fn tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Warnings and errors of the log (at most `n`, the last ones).
    pub(super) fn problems(&self, n: usize) -> Vec<String> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let found: Vec<String> = text
            .lines()
            .filter(|l| l.contains(" WARN ") || l.contains(" ERROR ") || l.contains("panicked"))
            .map(str::to_owned)
            .collect();
        found[found.len().saturating_sub(n)..].to_vec()
    }

    /// SIGTERM and wait (SIGKILL after 30 s).
    pub(super) fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if matches!(child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        progress("controller ignored SIGTERM for 30 s: killing it");
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.stop();
    }
}
