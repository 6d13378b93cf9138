//! `inplace-daemon-bench`: prints the daemon's figures against a real, stand-alone
//! containerd (see `inplace_testkit::containerd`). Needs root and the Debian packages
//! containerd runc docker-registry skopeo busybox-static jq.
//!
//! 1. idle RSS of `inplace-daemon` (needs an API server: `--kubeconfig`, default the
//!    test bed's when it is up);
//! 2. pre-pull of N distinct images at parallelism P through the daemon's puller vs
//!    `ctr images pull` of the same N run P at a time (content removed between runs);
//! 3. in-place container replacement vs a full pod-sandbox recreate, through CRI.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use inplace_daemon::api::{ImageSpec, ImageTagSpec, NodeImageSpec, NodeImageStatus};
use inplace_daemon::cri::CriClient;
use inplace_daemon::metrics::Metrics;
use inplace_daemon::puller::{Puller, PullerConfig, Snapshot, no_secrets};
use inplace_testkit::containerd::{Fixture, free_port};
use k8s_cri::v1::{
    ContainerConfig, ContainerMetadata, CreateContainerRequest, ImageSpec as CriImageSpec,
    KeyValue, LinuxPodSandboxConfig, LinuxSandboxSecurityContext, NamespaceMode, NamespaceOption,
    PodSandboxConfig, PodSandboxMetadata, RemoveContainerRequest, RemovePodSandboxRequest,
    RunPodSandboxRequest, StartContainerRequest, StopContainerRequest, StopPodSandboxRequest,
};
use tokio::sync::watch;

#[derive(Debug, Parser)]
struct Args {
    #[arg(long, default_value_t = 8)]
    images: usize,
    #[arg(long, default_value_t = 4)]
    parallelism: usize,
    /// Size of each image's single layer (random bytes).
    #[arg(long, default_value_t = 16384)]
    image_kib: usize,
    /// Rounds of each pull measurement (alternating which goes first).
    #[arg(long, default_value_t = 3)]
    pull_rounds: usize,
    /// Rounds of each restart measurement.
    #[arg(long, default_value_t = 5)]
    restart_rounds: usize,
    /// Kubeconfig for the idle-RSS measurement.
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// Seconds the daemon idles before its RSS is read.
    #[arg(long, default_value_t = 15)]
    idle_seconds: u64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .context("no VmRSS")
}

async fn idle_rss(fx: &Fixture, args: &Args) -> anyhow::Result<()> {
    let kc = args.kubeconfig.clone().or_else(|| {
        let p = PathBuf::from(
            std::env::var("INPLACE_TESTBED_DIR")
                .unwrap_or_else(|_| "/var/tmp/inplace-testbed".into()),
        )
        .join("kubeconfig");
        p.exists().then_some(p)
    });
    let Some(kc) = kc else {
        println!(
            "idle RSS: not measured (no kubeconfig: pass --kubeconfig or bring the test bed up)"
        );
        return Ok(());
    };
    let exe = std::env::current_exe()?
        .parent()
        .context("exe dir")?
        .join("inplace-daemon");
    let port = free_port()?;
    let mut child = std::process::Command::new(&exe)
        .env("NODE_NAME", "inplace-bench-idle-node")
        .env("KUBECONFIG", &kc)
        .env("RUST_LOG", "warn")
        .arg("--cri-endpoint")
        .arg(&fx.socket)
        .arg("--addr")
        .arg(format!("127.0.0.1:{port}"))
        .spawn()
        .with_context(|| format!("starting {}", exe.display()))?;
    tokio::time::sleep(Duration::from_secs(args.idle_seconds)).await;
    let alive = child.try_wait()?.is_none();
    let rss = rss_kib(child.id());
    let health = reqwest_like_get(port, "/healthz").await;
    let _ = child.kill();
    let _ = child.wait();
    if !alive {
        bail!("the daemon exited during the idle measurement");
    }
    let rss = rss?;
    println!(
        "idle RSS: {:.1} MiB ({} KiB) after {} s idle (target <= 16 MiB); /healthz: {}",
        rss as f64 / 1024.0,
        rss,
        args.idle_seconds,
        health.unwrap_or_else(|e| e.to_string())
    );
    Ok(())
}

async fn reqwest_like_get(port: u16, path: &str) -> anyhow::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .await?;
    let mut b = Vec::new();
    s.read_to_end(&mut b).await?;
    let t = String::from_utf8_lossy(&b);
    let status = t.lines().next().unwrap_or("").to_string();
    let body = t.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    Ok(format!("{status} {body}"))
}

async fn remove_images(fx: &Fixture, refs: &[String]) -> anyhow::Result<()> {
    let out = fx
        .ctr()
        .args(["images", "rm", "--sync"])
        .args(refs)
        .output()?;
    if !out.status.success() {
        bail!("ctr images rm: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

async fn pull_with_daemon(fx: &Fixture, refs: &[String], p: usize) -> anyhow::Result<f64> {
    let cri = CriClient::new(&fx.socket, Duration::from_secs(30))?;
    let (puller, mut status_rx) = Puller::new(
        cri,
        PullerConfig {
            max_concurrent: p,
            stall_window: None,
        },
        no_secrets(),
        Metrics::unregistered(),
    );
    let spec = NodeImageSpec {
        images: refs
            .iter()
            .map(|r| {
                let name = inplace_proto::image_ref::split(r).name.to_string();
                (
                    name,
                    ImageSpec {
                        tags: vec![ImageTagSpec {
                            tag: "v1".into(),
                            ..Default::default()
                        }],
                        ..Default::default()
                    },
                )
            })
            .collect(),
    };
    let t0 = Instant::now();
    let (_tx, rx) = watch::channel(Some(Snapshot {
        spec,
        status: NodeImageStatus::default(),
        resource_version: None,
    }));
    let task = tokio::spawn(puller.run(rx));
    loop {
        let s = status_rx.borrow_and_update().clone();
        if s.desired > 0 && s.succeeded + s.failed == s.desired {
            task.abort();
            if s.failed > 0 {
                bail!("daemon pulls failed: {s:?}");
            }
            return Ok(t0.elapsed().as_secs_f64());
        }
        if t0.elapsed() > Duration::from_secs(600) {
            bail!("daemon pulls did not finish");
        }
        let _ = tokio::time::timeout(Duration::from_secs(1), status_rx.changed()).await;
    }
}

async fn pull_with_ctr(fx: &Fixture, refs: &[String], p: usize) -> anyhow::Result<f64> {
    let t0 = Instant::now();
    // P at a time, like `xargs -P`: a slot frees when its pull ends
    let (tx, mut rx) = tokio::sync::mpsc::channel::<anyhow::Result<()>>(refs.len());
    let sem = std::sync::Arc::new(tokio::sync::Semaphore::new(p.max(1)));
    for r in refs {
        let permit = sem.clone().acquire_owned().await?;
        let mut cmd = tokio::process::Command::from(fx.ctr());
        cmd.args(["images", "pull", "--plain-http", r]);
        let tx = tx.clone();
        tokio::spawn(async move {
            let out = cmd.output().await;
            drop(permit);
            let res = match out {
                Ok(o) if o.status.success() => Ok(()),
                Ok(o) => Err(anyhow::anyhow!(
                    "ctr pull: {}",
                    String::from_utf8_lossy(&o.stderr)
                )),
                Err(e) => Err(e.into()),
            };
            let _ = tx.send(res).await;
        });
    }
    drop(tx);
    while let Some(r) = rx.recv().await {
        r?;
    }
    Ok(t0.elapsed().as_secs_f64())
}

async fn prepull(fx: &Fixture, args: &Args) -> anyhow::Result<()> {
    let mib = (args.images * args.image_kib) as f64 / 1024.0;
    let (mut d, mut c) = (Vec::new(), Vec::new());
    for round in 0..args.pull_rounds {
        let order = if round % 2 == 0 {
            ["daemon", "ctr"]
        } else {
            ["ctr", "daemon"]
        };
        for who in order {
            // fresh random content for every run: nothing is in containerd beforehand
            let refs = fx.push_bulk(&format!("r{round}-{who}"), args.images, args.image_kib)?;
            let secs = if who == "daemon" {
                pull_with_daemon(fx, &refs, args.parallelism).await?
            } else {
                pull_with_ctr(fx, &refs, args.parallelism).await?
            };
            println!(
                "  round {round}: {who:6} {secs:.2} s ({:.1} MiB/s)",
                mib / secs
            );
            if who == "daemon" {
                d.push(secs)
            } else {
                c.push(secs)
            }
            remove_images(fx, &refs).await?;
        }
    }
    let (dm, cm) = (median(d), median(c));
    println!(
        "pre-pull {} images x {} KiB at parallelism {}: daemon median {:.2} s ({:.1} MiB/s), ctr median {:.2} s ({:.1} MiB/s); daemon/ctr throughput = {:.2}x (target >= 0.9x)",
        args.images,
        args.image_kib,
        args.parallelism,
        dm,
        mib / dm,
        cm,
        mib / cm,
        cm / dm
    );
    Ok(())
}

fn sandbox_config(cgroup_parent: &str, name: &str, attempt: u32) -> PodSandboxConfig {
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.into(),
            uid: format!("bench-{name}-{attempt}"),
            namespace: "inplace-bench".into(),
            attempt,
        }),
        linux: Some(LinuxPodSandboxConfig {
            cgroup_parent: cgroup_parent.into(),
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(NamespaceOption {
                    network: NamespaceMode::Node as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn container_config(image: &str, attempt: u32, port: u16) -> ContainerConfig {
    ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: "app".into(),
            attempt,
        }),
        image: Some(CriImageSpec {
            image: image.into(),
            ..Default::default()
        }),
        envs: vec![KeyValue {
            key: "PORT".into(),
            value: port.to_string(),
        }],
        ..Default::default()
    }
}

async fn wait_http(port: u16, limit: Duration) -> anyhow::Result<()> {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if let Ok(s) = reqwest_like_get(port, "/version").await
            && s.contains(" 200 ")
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    bail!("app did not serve on {port} within {limit:?}")
}

async fn restarts(fx: &Fixture, args: &Args) -> anyhow::Result<()> {
    let cri = CriClient::new(&fx.socket, Duration::from_secs(60))?;
    let v1 = format!("{}/inplace-test/app:v1", fx.registry);
    let v2 = format!("{}/inplace-test/app:v2", fx.registry);
    for i in [&v1, &v2] {
        cri.pull_image(i, None, None, Duration::from_secs(120))
            .await?;
    }
    let mut rt = cri.runtime_client();
    let port = free_port()?;
    // in place: stop the container, create and start the new one in the same sandbox
    let sb_cfg = sandbox_config(&fx.cgroup_parent, "inplace", 0);
    let sb = rt
        .run_pod_sandbox(RunPodSandboxRequest {
            config: Some(sb_cfg.clone()),
            runtime_handler: String::new(),
        })
        .await?
        .into_inner()
        .pod_sandbox_id;
    let create =
        |image: &str, attempt: u32, sb: &str, cfg: &PodSandboxConfig| CreateContainerRequest {
            pod_sandbox_id: sb.into(),
            config: Some(container_config(image, attempt, port)),
            sandbox_config: Some(cfg.clone()),
        };
    let mut cur = rt
        .create_container(create(&v1, 0, &sb, &sb_cfg))
        .await?
        .into_inner()
        .container_id;
    rt.start_container(StartContainerRequest {
        container_id: cur.clone(),
    })
    .await?;
    wait_http(port, Duration::from_secs(30)).await?;
    let mut inplace = Vec::new();
    for round in 0..args.restart_rounds {
        let image = if round % 2 == 0 { &v2 } else { &v1 };
        let t0 = Instant::now();
        rt.stop_container(StopContainerRequest {
            container_id: cur.clone(),
            timeout: 10,
        })
        .await?;
        rt.remove_container(RemoveContainerRequest {
            container_id: cur.clone(),
        })
        .await?;
        let attempt = u32::try_from(round + 1)?;
        cur = rt
            .create_container(create(image, attempt, &sb, &sb_cfg))
            .await?
            .into_inner()
            .container_id;
        rt.start_container(StartContainerRequest {
            container_id: cur.clone(),
        })
        .await?;
        wait_http(port, Duration::from_secs(30)).await?;
        inplace.push(t0.elapsed().as_secs_f64());
    }
    rt.stop_pod_sandbox(StopPodSandboxRequest {
        pod_sandbox_id: sb.clone(),
    })
    .await?;
    rt.remove_pod_sandbox(RemovePodSandboxRequest { pod_sandbox_id: sb })
        .await?;

    // recreate: stop and remove the whole sandbox, run a new one with the container
    let mut recreate = Vec::new();
    let mut sb_cur: Option<String> = None;
    for round in 0..=args.restart_rounds {
        let image = if round % 2 == 0 { &v2 } else { &v1 };
        let t0 = Instant::now();
        if let Some(old) = sb_cur.take() {
            rt.stop_pod_sandbox(StopPodSandboxRequest {
                pod_sandbox_id: old.clone(),
            })
            .await?;
            rt.remove_pod_sandbox(RemovePodSandboxRequest {
                pod_sandbox_id: old,
            })
            .await?;
        }
        let cfg = sandbox_config(&fx.cgroup_parent, "recreate", u32::try_from(round)?);
        let sb = rt
            .run_pod_sandbox(RunPodSandboxRequest {
                config: Some(cfg.clone()),
                runtime_handler: String::new(),
            })
            .await?
            .into_inner()
            .pod_sandbox_id;
        let c = rt
            .create_container(create(image, 0, &sb, &cfg))
            .await?
            .into_inner()
            .container_id;
        rt.start_container(StartContainerRequest { container_id: c })
            .await?;
        wait_http(port, Duration::from_secs(30)).await?;
        sb_cur = Some(sb);
        if round > 0 {
            recreate.push(t0.elapsed().as_secs_f64());
        }
    }
    if let Some(old) = sb_cur {
        rt.stop_pod_sandbox(StopPodSandboxRequest {
            pod_sandbox_id: old.clone(),
        })
        .await?;
        rt.remove_pod_sandbox(RemovePodSandboxRequest {
            pod_sandbox_id: old,
        })
        .await?;
    }
    let (im, rm) = (median(inplace.clone()), median(recreate.clone()));
    println!(
        "restart until serving, median of {}: in-place container replacement {:.0} ms, full sandbox recreate {:.0} ms; recreate/in-place = {:.2}x (host-network sandboxes: no CNI time in the recreate figure)",
        args.restart_rounds,
        im * 1000.0,
        rm * 1000.0,
        rm / im
    );
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let fx = Fixture::start().context("starting containerd + registry")?;
    println!(
        "fixture: containerd {} , registry {}",
        fx.socket.display(),
        fx.registry
    );
    idle_rss(&fx, &args).await?;
    prepull(&fx, &args).await?;
    restarts(&fx, &args).await?;
    Ok(())
}
