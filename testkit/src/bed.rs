//! The test bed (`tests/testbed/up`) as the suites reach it: its folder, kubeconfig,
//! kubectl, test images and a client.
//!
//! Environment: `INPLACE_TESTBED_DIR` (default `/var/tmp/inplace-testbed`),
//! `INPLACE_TESTBED_KUBECONFIG` (default `<dir>/kubeconfig`), `INPLACE_KUBECTL` (default
//! the bed's own kubectl, named in `<dir>/env`, else `kubectl` on PATH),
//! `INPLACE_TEST_IMAGE_V1|V2|V3` (default `127.0.0.1:5000/inplace-test/app:v1|v2|v3`).

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// What went wrong reaching the bed.
#[derive(Debug, thiserror::Error)]
#[error("test bed: {0}")]
pub struct BedError(pub String);

/// The bed's folder.
pub fn dir() -> PathBuf {
    PathBuf::from(
        std::env::var("INPLACE_TESTBED_DIR").unwrap_or_else(|_| "/var/tmp/inplace-testbed".into()),
    )
}

/// The bed's admin kubeconfig.
pub fn kubeconfig() -> PathBuf {
    match std::env::var("INPLACE_TESTBED_KUBECONFIG") {
        Ok(p) if !p.is_empty() => PathBuf::from(p),
        _ => dir().join("kubeconfig"),
    }
}

/// The kubectl to run: the one the bed names (its server's version) unless overridden.
pub fn kubectl_bin() -> String {
    if let Ok(k) = std::env::var("INPLACE_KUBECTL") {
        return k;
    }
    std::fs::read_to_string(dir().join("env"))
        .ok()
        .and_then(|env| {
            env.lines().find_map(|l| {
                l.trim()
                    .strip_prefix("export INPLACE_KUBECTL=")
                    .map(|v| v.trim_matches('"').to_string())
            })
        })
        .unwrap_or_else(|| "kubectl".into())
}

/// The bed's test image of `version` (`v1`, `v2`, `v3`).
pub fn image(version: &str) -> String {
    let var = format!("INPLACE_TEST_IMAGE_{}", version.to_uppercase());
    std::env::var(var).unwrap_or_else(|_| format!("127.0.0.1:5000/inplace-test/app:{version}"))
}

/// A client of the bed's API server.
pub async fn client() -> Result<kube::Client, BedError> {
    let path = kubeconfig();
    let kc = kube::config::Kubeconfig::read_from(&path).map_err(|e| {
        BedError(format!(
            "{}: {e} (is the bed up? tests/testbed/up)",
            path.display()
        ))
    })?;
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| BedError(e.to_string()))?;
    kube::Client::try_from(config).map_err(|e| BedError(e.to_string()))
}

/// Runs kubectl with the bed's kubeconfig, `stdin` fed to it; its stdout on success, an
/// error with its stdout and stderr otherwise.
pub fn kubectl(args: &[&str], stdin: Option<&str>) -> Result<String, BedError> {
    let mut cmd = Command::new(kubectl_bin());
    cmd.arg("--kubeconfig").arg(kubeconfig()).args(args);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    let fail = |e: std::io::Error| BedError(format!("kubectl {}: {e}", args.join(" ")));
    let mut child = cmd.spawn().map_err(fail)?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(input.as_bytes()).map_err(fail)?;
    }
    let out = child.wait_with_output().map_err(fail)?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(stdout)
    } else {
        Err(BedError(format!(
            "kubectl {}: {stdout}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        )))
    }
}
