//! In-place cpu/memory resize: the runtime limits a container spec asks for (the
//! kubelet's cgroup conversion), what the runtime applied (CRI `ContainerStatus.resources`
//! when the runtime reports it, else the container's cgroup v1 files), and applying a
//! resize through CRI `UpdateContainerResources` (only with `--apply-resize-via-cri`).
//!
//! Caveats of applying through CRI (for kubelets without the `pods/resize` subresource):
//! the kubelet does not know; the pod cgroup (parent) is not resized, so a limit above
//! the pod-level limit is capped by it; a container restart by the kubelet re-applies the
//! pod spec's values (which, on such clusters, are the new ones the controller wrote).

use std::path::{Path, PathBuf};

use k8s_cri::v1::LinuxContainerResources;
use k8s_openapi::api::core::v1::ResourceRequirements;

use crate::cri::{CriClient, CriError};

/// CFS period the kubelet uses.
pub const CPU_PERIOD: i64 = 100_000;
const MIN_QUOTA: i64 = 1_000;
const MIN_SHARES: i64 = 2;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ResizeError {
    #[error("invalid quantity {0:?}")]
    Quantity(String),
    #[error("{0}")]
    Cri(String),
    #[error("cannot read the container's cgroup: {0}")]
    Cgroup(String),
}

impl From<CriError> for ResizeError {
    fn from(e: CriError) -> Self {
        ResizeError::Cri(e.runtime_message())
    }
}

/// A Kubernetes quantity in milli-units (cpu) or units (memory), rounded up
/// ([`inplace_proto::quantity`]). Negative quantities are refused.
pub fn parse_quantity(q: &str, milli: bool) -> Result<i64, ResizeError> {
    let bad = || ResizeError::Quantity(q.to_string());
    let v = if milli {
        inplace_proto::quantity::millis(q)
    } else {
        inplace_proto::quantity::units(q)
    }
    .ok_or_else(bad)?;
    if v < 0 {
        return Err(bad());
    }
    i64::try_from(v).map_err(|_| bad())
}

/// Runtime limits for a container's resources (None: not set by the spec).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    pub cpu_quota: Option<i64>,
    pub cpu_shares: Option<i64>,
    pub memory_limit: Option<i64>,
}

impl std::fmt::Display for Limits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let o = |v: Option<i64>| v.map(|v| v.to_string()).unwrap_or_else(|| "-".into());
        write!(
            f,
            "cpu.cfs_quota_us={} cpu.shares={} memory.limit_in_bytes={}",
            o(self.cpu_quota),
            o(self.cpu_shares),
            o(self.memory_limit)
        )
    }
}

/// The kubelet's conversion: quota = limit millicores × period / 1000, shares = request
/// millicores × 1024 / 1000 (request defaults to the limit), memory = limit bytes.
pub fn target(r: &ResourceRequirements) -> Result<Limits, ResizeError> {
    let get = |m: &Option<
        std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >,
               k: &str| { m.as_ref().and_then(|m| m.get(k)).map(|q| q.0.clone()) };
    let cpu_limit = get(&r.limits, "cpu")
        .map(|q| parse_quantity(&q, true))
        .transpose()?;
    let cpu_request = get(&r.requests, "cpu")
        .map(|q| parse_quantity(&q, true))
        .transpose()?
        .or(cpu_limit);
    let mem = get(&r.limits, "memory")
        .map(|q| parse_quantity(&q, false))
        .transpose()?;
    Ok(Limits {
        cpu_quota: cpu_limit.map(|m| (m * CPU_PERIOD / 1000).max(MIN_QUOTA)),
        cpu_shares: cpu_request.map(|m| (m * 1024 / 1000).max(MIN_SHARES)),
        memory_limit: mem,
    })
}

/// What differs between the target and what was observed (only fields the target sets).
pub fn mismatches(want: &Limits, got: &Limits) -> Vec<String> {
    let mut out = Vec::new();
    for (name, w, g) in [
        ("cpu.cfs_quota_us", want.cpu_quota, got.cpu_quota),
        ("cpu.shares", want.cpu_shares, got.cpu_shares),
        ("memory.limit_in_bytes", want.memory_limit, got.memory_limit),
    ] {
        if let Some(w) = w
            && g != Some(w)
        {
            out.push(format!(
                "{name} is {} not {w}",
                g.map(|g| g.to_string()).unwrap_or_else(|| "unknown".into())
            ));
        }
    }
    out
}

/// The CRI request for a target (unset fields keep the runtime's current values).
pub fn cri_resources(t: &Limits, current: &Limits) -> LinuxContainerResources {
    LinuxContainerResources {
        cpu_period: CPU_PERIOD,
        cpu_quota: t.cpu_quota.or(current.cpu_quota).unwrap_or(-1),
        cpu_shares: t.cpu_shares.or(current.cpu_shares).unwrap_or(0),
        memory_limit_in_bytes: t.memory_limit.or(current.memory_limit).unwrap_or(0),
        ..Default::default()
    }
}

/// Where the observed limits came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    Cri,
    Cgroup(PathBuf),
}

/// The container's cgroups path from `ContainerStatus` verbose info (containerd puts the
/// OCI spec there).
pub fn cgroups_path(info: &std::collections::HashMap<String, String>) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(info.get("info")?).ok()?;
    v.pointer("/runtimeSpec/linux/cgroupsPath")?
        .as_str()
        .map(str::to_string)
}

fn read_i64(p: &Path) -> Result<i64, ResizeError> {
    std::fs::read_to_string(p)
        .map_err(|e| ResizeError::Cgroup(format!("{}: {e}", p.display())))?
        .trim()
        .parse()
        .map_err(|e| ResizeError::Cgroup(format!("{}: {e}", p.display())))
}

/// Reads cgroup v1 limits under `root` (normally `/sys/fs/cgroup`) for `cgroups_path`
/// (cgroupfs driver form `/a/b/id`).
pub fn read_cgroup_v1(root: &Path, cgroups_path: &str) -> Result<(Limits, PathBuf), ResizeError> {
    if !cgroups_path.starts_with('/') {
        return Err(ResizeError::Cgroup(format!(
            "cgroups path {cgroups_path:?} is not a cgroupfs path (systemd driver paths are not read)"
        )));
    }
    let rel = cgroups_path;
    let rel = rel.trim_start_matches('/');
    let cpu = root.join("cpu").join(rel);
    let mem = root.join("memory").join(rel);
    let limits = Limits {
        cpu_quota: Some(read_i64(&cpu.join("cpu.cfs_quota_us"))?),
        cpu_shares: Some(read_i64(&cpu.join("cpu.shares"))?),
        memory_limit: Some(read_i64(&mem.join("memory.limit_in_bytes"))?),
    };
    Ok((limits, mem))
}

/// What is applied to container `id`: its cgroup v1 files when the runtime names a
/// cgroupfs path that can be read here (the kernel's truth), else the resources the
/// runtime reports in `ContainerStatus` (what it recorded in the OCI spec).
pub async fn observe(cri: &CriClient, id: &str) -> Result<(Limits, Source), ResizeError> {
    let (status, info) = cri.container_status_verbose(id).await?;
    let from_files = cgroups_path(&info)
        .ok_or_else(|| ResizeError::Cgroup("the runtime reports no cgroupsPath".into()))
        .and_then(|p| read_cgroup_v1(Path::new("/sys/fs/cgroup"), &p));
    match (from_files, status.resources.and_then(|r| r.linux)) {
        (Ok((l, p)), _) => Ok((l, Source::Cgroup(p))),
        (Err(_), Some(l)) => Ok((
            Limits {
                cpu_quota: Some(l.cpu_quota),
                cpu_shares: Some(l.cpu_shares),
                memory_limit: Some(l.memory_limit_in_bytes),
            },
            Source::Cri,
        )),
        (Err(e), None) => Err(e),
    }
}

/// What a resize did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    pub container_id: String,
    pub before: Limits,
    pub after: Limits,
    pub source: Source,
    pub mismatches: Vec<String>,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let src = match &self.source {
            Source::Cri => "CRI ContainerStatus".to_string(),
            Source::Cgroup(p) => format!("cgroup v1 files ({})", p.display()),
        };
        write!(
            f,
            "container {}: before [{}] after [{}] read from {src}: {}",
            self.container_id,
            self.before,
            self.after,
            if self.mismatches.is_empty() {
                "applied".to_string()
            } else {
                format!("NOT applied: {}", self.mismatches.join(", "))
            }
        )
    }
}

/// Applies `want` through CRI UpdateContainerResources and verifies it.
pub async fn apply(cri: &CriClient, id: &str, want: &Limits) -> Result<Report, ResizeError> {
    let (before, _) = observe(cri, id).await?;
    cri.update_container_resources(id, cri_resources(want, &before))
        .await?;
    let (after, source) = observe(cri, id).await?;
    Ok(Report {
        container_id: id.into(),
        before,
        mismatches: mismatches(want, &after),
        after,
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use std::collections::BTreeMap;

    #[test]
    fn quantities() {
        let cases = [
            ("500m", true, Ok(500)),
            ("1", true, Ok(1000)),
            ("1.5", true, Ok(1500)),
            ("0.1", true, Ok(100)),
            ("128Mi", false, Ok(134_217_728)),
            ("1Gi", false, Ok(1_073_741_824)),
            ("1G", false, Ok(1_000_000_000)),
            ("100k", false, Ok(100_000)),
            ("12345", false, Ok(12345)),
            ("abc", false, Err(ResizeError::Quantity("abc".into()))),
            ("-1", true, Err(ResizeError::Quantity("-1".into()))),
        ];
        for (q, milli, want) in cases {
            assert_eq!(parse_quantity(q, milli), want, "{q}");
        }
    }

    #[test]
    fn quantities_in_every_suffix_and_exponent_form() {
        let cases = [
            ("250m", true, Ok(250)),
            ("1500m", false, Ok(2)),
            ("1k", true, Ok(1_000_000)),
            ("1Ki", false, Ok(1024)),
            ("1.5Mi", false, Ok(1_572_864)),
            ("2Gi", false, Ok(2_147_483_648)),
            ("1Ti", false, Ok(1_099_511_627_776)),
            ("1M", false, Ok(1_000_000)),
            ("3G", false, Ok(3_000_000_000)),
            ("1E", false, Ok(1_000_000_000_000_000_000)),
            ("1Ei", false, Ok(1_152_921_504_606_846_976)),
            ("1e3", false, Ok(1000)),
            ("2E6", false, Ok(2_000_000)),
            ("1.5e-3", true, Ok(2)),
            ("1n", true, Ok(1)),
            ("10E", false, Err(ResizeError::Quantity("10E".into()))),
            ("Mi", false, Err(ResizeError::Quantity("Mi".into()))),
            ("1Xi", false, Err(ResizeError::Quantity("1Xi".into()))),
        ];
        for (q, milli, want) in cases {
            assert_eq!(parse_quantity(q, milli), want, "{q}");
        }
    }

    fn rr(limits: &[(&str, &str)], requests: &[(&str, &str)]) -> ResourceRequirements {
        let m = |v: &[(&str, &str)]| {
            Some(
                v.iter()
                    .map(|(k, q)| (k.to_string(), Quantity(q.to_string())))
                    .collect::<BTreeMap<_, _>>(),
            )
        };
        ResourceRequirements {
            limits: m(limits),
            requests: m(requests),
            ..Default::default()
        }
    }

    #[test]
    fn kubelet_conversion() {
        let t = target(&rr(
            &[("cpu", "500m"), ("memory", "64Mi")],
            &[("cpu", "250m")],
        ))
        .ok();
        assert_eq!(
            t,
            Some(Limits {
                cpu_quota: Some(50_000),
                cpu_shares: Some(256),
                memory_limit: Some(67_108_864)
            })
        );
        let t = target(&rr(&[("cpu", "1m")], &[])).ok();
        assert_eq!(
            t,
            Some(Limits {
                cpu_quota: Some(1_000),
                cpu_shares: Some(2),
                memory_limit: None
            })
        );
        assert!(target(&rr(&[("memory", "lots")], &[])).is_err());
    }

    #[test]
    fn mismatch_report() {
        let want = Limits {
            cpu_quota: Some(50_000),
            cpu_shares: None,
            memory_limit: Some(10),
        };
        let got = Limits {
            cpu_quota: Some(50_000),
            cpu_shares: Some(2),
            memory_limit: Some(11),
        };
        assert_eq!(
            mismatches(&want, &got),
            vec!["memory.limit_in_bytes is 11 not 10".to_string()]
        );
        assert!(
            mismatches(
                &want,
                &Limits {
                    memory_limit: Some(10),
                    ..got
                }
            )
            .is_empty()
        );
    }

    #[test]
    fn cgroups_path_from_verbose_info() {
        let info = std::collections::HashMap::from([(
            "info".to_string(),
            r#"{"runtimeSpec":{"linux":{"cgroupsPath":"/kubepods/burstable/podu/abc"}}}"#
                .to_string(),
        )]);
        assert_eq!(
            cgroups_path(&info).as_deref(),
            Some("/kubepods/burstable/podu/abc")
        );
        assert_eq!(cgroups_path(&Default::default()), None);
    }

    #[test]
    fn reads_cgroup_v1_files() -> Result<(), Box<dyn std::error::Error>> {
        let root = tempfile::tempdir()?;
        let cpu = root.path().join("cpu/k8s.io/abc");
        let mem = root.path().join("memory/k8s.io/abc");
        std::fs::create_dir_all(&cpu)?;
        std::fs::create_dir_all(&mem)?;
        std::fs::write(cpu.join("cpu.cfs_quota_us"), "50000\n")?;
        std::fs::write(cpu.join("cpu.shares"), "256\n")?;
        std::fs::write(mem.join("memory.limit_in_bytes"), "67108864\n")?;
        let (l, p) = read_cgroup_v1(root.path(), "/k8s.io/abc")?;
        assert_eq!(
            l,
            Limits {
                cpu_quota: Some(50_000),
                cpu_shares: Some(256),
                memory_limit: Some(67_108_864)
            }
        );
        assert_eq!(p, mem);
        Ok(())
    }
}
