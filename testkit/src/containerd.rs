//! A stand-alone containerd 1.6 with its own root, state and socket under a temp dir, a
//! local OCI registry (Debian's `docker-registry`) on a free loopback port with the bed's
//! test images pushed by `skopeo`, and loopback registry fakes (a counting slow proxy, a
//! black hole): for the daemon's tests and its bench.
//!
//! Needs root and the Debian packages `containerd runc docker-registry skopeo
//! busybox-static jq`. Nothing is downloaded from anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::net::TcpListener as StdListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Debug, thiserror::Error)]
#[error("fixture: {0}")]
pub struct FixtureError(pub String);

fn err(m: impl Into<String>) -> FixtureError {
    FixtureError(m.into())
}

/// The workspace root (the parent of this crate's folder).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

fn run(cmd: &mut Command) -> Result<String, FixtureError> {
    let out = cmd
        .output()
        .map_err(|e| err(format!("cannot run {cmd:?}: {e}")))?;
    if !out.status.success() {
        return Err(err(format!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A free loopback port (bound then released; good enough for tests).
pub fn free_port() -> Result<u16, FixtureError> {
    let l = StdListener::bind("127.0.0.1:0").map_err(|e| err(e.to_string()))?;
    Ok(l.local_addr().map_err(|e| err(e.to_string()))?.port())
}

fn wait_until(
    what: &str,
    limit: Duration,
    mut ok: impl FnMut() -> bool,
) -> Result<(), FixtureError> {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(err(format!("{what} not ready after {limit:?}")))
}

/// Checks the preconditions; the error says exactly what is missing.
pub fn check_prerequisites() -> Result<(), FixtureError> {
    let uid = run(Command::new("id").arg("-u"))?;
    if uid.trim() != "0" {
        return Err(err("must run as root (starts containerd)"));
    }
    for b in [
        "/usr/bin/containerd",
        "/usr/bin/docker-registry",
        "/usr/bin/skopeo",
        "/bin/busybox",
        "/usr/bin/jq",
    ] {
        if !Path::new(b).exists() {
            return Err(err(format!(
                "{b} missing: apt-get install containerd runc docker-registry skopeo busybox-static jq"
            )));
        }
    }
    Ok(())
}

/// A running stand-alone containerd and registry, stopped and removed on drop.
#[derive(Debug)]
pub struct Fixture {
    pub dir: PathBuf,
    pub socket: PathBuf,
    /// `127.0.0.1:<port>` of the registry.
    pub registry: String,
    children: Vec<Child>,
    containerd_child: Option<usize>,
    /// cgroup parent for sandboxes made through [`run_app`]; every process under it is
    /// killed when the fixture drops.
    pub cgroup_parent: String,
}

impl Fixture {
    /// Starts containerd and a registry holding `inplace-test/app:{v1,v2,v3}` and
    /// `inplace-test/pause:1` (built by `tests/testbed/mkimages`).
    pub fn start() -> Result<Self, FixtureError> {
        check_prerequisites()?;
        let base = PathBuf::from("/var/tmp");
        let dir = base.join(format!(
            "inplace-daemon-fixture-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&dir).map_err(|e| err(format!("mkdir {}: {e}", dir.display())))?;
        let mut fx = Fixture {
            socket: dir.join("containerd.sock"),
            registry: String::new(),
            dir,
            children: Vec::new(),
            containerd_child: None,
            cgroup_parent: format!("/inplace-daemon-fixture-{}", std::process::id()),
        };
        fx.start_registry()?;
        fx.push_images()?;
        fx.start_containerd()?;
        Ok(fx)
    }

    fn spawn(&mut self, name: &str, cmd: &mut Command) -> Result<(), FixtureError> {
        let log = std::fs::File::create(self.dir.join(format!("{name}.log")))
            .map_err(|e| err(e.to_string()))?;
        let log2 = log.try_clone().map_err(|e| err(e.to_string()))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(|e| err(format!("cannot start {name}: {e}")))?;
        self.children.push(child);
        Ok(())
    }

    fn start_registry(&mut self) -> Result<(), FixtureError> {
        let port = free_port()?;
        self.registry = format!("127.0.0.1:{port}");
        let cfg = self.dir.join("registry.yml");
        std::fs::write(
            &cfg,
            format!(
                "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {}\n",
                self.dir.join("registry").display(),
                self.registry
            ),
        )
        .map_err(|e| err(e.to_string()))?;
        self.spawn(
            "registry",
            Command::new("/usr/bin/docker-registry")
                .arg("serve")
                .arg(&cfg),
        )?;
        let reg = self.registry.clone();
        wait_until("registry", Duration::from_secs(20), || {
            std::net::TcpStream::connect(&reg).is_ok()
        })
    }

    /// Starts a second registry that wants `user`/`password` (htpasswd auth, bcrypt entry
    /// made by perl's `crypt`, which is libxcrypt's: Debian has no `htpasswd` without
    /// apache2-utils), pullable over HTTP, holding `inplace-test/app:{v1,v2}`; returns its
    /// `127.0.0.1:<port>`. Stopped with the fixture.
    pub fn start_auth_registry(
        &mut self,
        user: &str,
        password: &str,
    ) -> Result<String, FixtureError> {
        let port = free_port()?;
        let addr = format!("127.0.0.1:{port}");
        let dir = self.dir.join(format!("auth-registry-{port}"));
        std::fs::create_dir_all(&dir).map_err(|e| err(e.to_string()))?;
        let salt: String = (0..22)
            .map(|_| {
                let chars = b"./ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
                chars[rand::random_range(0..chars.len())] as char
            })
            .collect();
        let hash = Command::new("perl")
            .args(["-e", "print crypt($ARGV[0], $ARGV[1])", password])
            .arg(format!("$2b$05${salt}"))
            .output()
            .map_err(|e| err(format!("perl: {e}")))?;
        let hash = String::from_utf8_lossy(&hash.stdout).into_owned();
        if !hash.starts_with("$2b$05$") {
            return Err(err(format!("perl crypt made no bcrypt hash: {hash:?}")));
        }
        let htpasswd = dir.join("htpasswd");
        std::fs::write(&htpasswd, format!("{user}:{hash}\n")).map_err(|e| err(e.to_string()))?;
        let cfg = dir.join("registry.yml");
        std::fs::write(
            &cfg,
            format!(
                "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {addr}\nauth:\n  htpasswd:\n    realm: inplace-test\n    path: {}\n",
                dir.join("data").display(),
                htpasswd.display(),
            ),
        )
        .map_err(|e| err(e.to_string()))?;
        self.spawn(
            &format!("auth-registry-{port}"),
            Command::new("/usr/bin/docker-registry")
                .arg("serve")
                .arg(&cfg),
        )?;
        let a = addr.clone();
        wait_until("auth registry", Duration::from_secs(20), || {
            std::net::TcpStream::connect(&a).is_ok()
        })?;
        let images = self.dir.join("images");
        for v in ["v1", "v2"] {
            self.push_to(
                &images.join("app"),
                v,
                &format!("{addr}/inplace-test/app:{v}"),
                Some((user, password)),
            )?;
        }
        self.allow_http(&addr)?;
        Ok(addr)
    }

    /// Pushes an OCI layout tag to `<registry>/<repo>`.
    pub fn push(&self, layout: &Path, tag: &str, repo: &str) -> Result<(), FixtureError> {
        self.push_to(layout, tag, &format!("{}/{repo}", self.registry), None)
    }

    /// Pushes an OCI layout tag to the reference `dest` (`host:port/repo:tag`), logging in
    /// with `creds` when given.
    pub fn push_to(
        &self,
        layout: &Path,
        tag: &str,
        dest: &str,
        creds: Option<(&str, &str)>,
    ) -> Result<(), FixtureError> {
        let policy = self.dir.join("policy.json");
        if !policy.exists() {
            std::fs::write(
                &policy,
                r#"{"default":[{"type":"insecureAcceptAnything"}]}"#,
            )
            .map_err(|e| err(e.to_string()))?;
        }
        let mut cmd = Command::new("skopeo");
        cmd.arg("--policy")
            .arg(&policy)
            .args(["copy", "-q", "--dest-tls-verify=false"]);
        if let Some((u, p)) = creds {
            cmd.arg(format!("--dest-creds={u}:{p}"));
        }
        run(cmd
            .arg(format!("oci:{}:{tag}", layout.display()))
            .arg(format!("docker://{dest}")))?;
        Ok(())
    }

    fn push_images(&self) -> Result<(), FixtureError> {
        let images = self.dir.join("images");
        run(Command::new("bash")
            .arg(workspace_root().join("tests/testbed/mkimages"))
            .arg(&images))?;
        self.push(&images.join("pause"), "1", "inplace-test/pause:1")?;
        for v in ["v1", "v2", "v3"] {
            self.push(&images.join("app"), v, &format!("inplace-test/app:{v}"))?;
        }
        Ok(())
    }

    /// Builds `n` distinct images of `kib` KiB of fresh random bytes each and pushes them
    /// as `<registry>/<prefix>/img<i>:v1`; returns the references.
    pub fn push_bulk(
        &self,
        prefix: &str,
        n: usize,
        kib: usize,
    ) -> Result<Vec<String>, FixtureError> {
        let out = self.dir.join("bulk").join(prefix);
        run(Command::new("bash")
            .arg(workspace_root().join("daemon/tests/fixtures/mkbulk-images"))
            .arg(&out)
            .arg(n.to_string())
            .arg(kib.to_string()))?;
        let r = (0..n)
            .map(|i| {
                let repo = format!("{prefix}/img{i}:v1");
                self.push(&out.join(format!("bulk{i}")), "v1", &repo)?;
                Ok(format!("{}/{repo}", self.registry))
            })
            .collect();
        let _ = std::fs::remove_dir_all(&out);
        r
    }

    /// Lets containerd pull from `hostport` over plain HTTP.
    pub fn allow_http(&self, hostport: &str) -> Result<(), FixtureError> {
        let d = self.dir.join("certs.d").join(hostport);
        std::fs::create_dir_all(&d).map_err(|e| err(e.to_string()))?;
        std::fs::write(
            d.join("hosts.toml"),
            format!(
                "server = \"http://{hostport}\"\n\n[host.\"http://{hostport}\"]\n  capabilities = [\"pull\", \"resolve\"]\n  skip_verify = true\n"
            ),
        )
        .map_err(|e| err(e.to_string()))
    }

    fn start_containerd(&mut self) -> Result<(), FixtureError> {
        let d = self.dir.clone();
        self.allow_http(&self.registry.clone())?;
        let cfg = format!(
            r#"version = 2
root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "{sock}"
[ttrpc]
  address = "{sock}.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{reg}/inplace-test/pause:1"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{d}/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{d}/cni"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{d}/certs.d"
"#,
            root = d.join("root").display(),
            state = d.join("state").display(),
            sock = self.socket.display(),
            d = d.display(),
            reg = self.registry,
        );
        let path = d.join("containerd.toml");
        std::fs::write(&path, cfg).map_err(|e| err(e.to_string()))?;
        self.containerd_child = Some(self.children.len());
        self.spawn(
            "containerd",
            Command::new("/usr/bin/containerd")
                .arg("--config")
                .arg(&path)
                .args(["--log-level", "warn"]),
        )?;
        let sock = self.socket.clone();
        wait_until("containerd socket", Duration::from_secs(30), || {
            sock.exists()
        })?;
        // the socket appears before the CRI plugin serves: wait for CRI Version, on a
        // thread of its own (callers may be inside a runtime already)
        let sock = self.socket.clone();
        std::thread::spawn(move || -> Result<(), FixtureError> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| err(e.to_string()))?;
            rt.block_on(async move {
                let cri = inplace_daemon::cri::CriClient::new(&sock, Duration::from_secs(2))
                    .map_err(|e| err(e.to_string()))?;
                let t0 = Instant::now();
                loop {
                    match cri.version().await {
                        Ok(_) => return Ok(()),
                        Err(e) if t0.elapsed() > Duration::from_secs(30) => {
                            return Err(err(format!("CRI not answering: {e}")));
                        }
                        Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                    }
                }
            })
        })
        .join()
        .map_err(|_| err("CRI readiness thread panicked"))?
    }

    /// Kills containerd (SIGKILL) and starts it again on the same root and socket.
    pub fn restart_containerd(&mut self) -> Result<(), FixtureError> {
        let idx = self
            .containerd_child
            .take()
            .ok_or_else(|| err("containerd not started"))?;
        let mut old = self.children.remove(idx);
        let _ = old.kill();
        let _ = old.wait();
        let _ = std::fs::remove_file(&self.socket);
        self.start_containerd()
    }

    /// `ctr` against this containerd, in the CRI namespace.
    pub fn ctr(&self) -> Command {
        let mut c = Command::new("ctr");
        c.arg("--address").arg(&self.socket).args(["-n", "k8s.io"]);
        c
    }

    /// The tail of containerd's log, for failure messages.
    pub fn containerd_log(&self) -> String {
        let s = std::fs::read_to_string(self.dir.join("containerd.log")).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Fixture {
    /// Kills the processes of containers run under [`Fixture::cgroup_parent`] and removes
    /// those cgroups (v1 hierarchies).
    fn kill_fixture_cgroups(&self) {
        let rel = self.cgroup_parent.trim_start_matches('/');
        let Ok(hiers) = std::fs::read_dir("/sys/fs/cgroup") else {
            return;
        };
        let hiers: Vec<PathBuf> = hiers
            .flatten()
            .map(|e| e.path().join(rel))
            .filter(|p| p.exists())
            .collect();
        for h in &hiers {
            for procs in walk(h).into_iter().map(|d| d.join("cgroup.procs")) {
                for pid in std::fs::read_to_string(procs)
                    .unwrap_or_default()
                    .split_whitespace()
                {
                    let _ = Command::new("kill").args(["-9", pid]).status();
                }
            }
        }
        std::thread::sleep(Duration::from_millis(200));
        for h in &hiers {
            let mut dirs = walk(h);
            dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
            for d in dirs {
                let _ = std::fs::remove_dir(d);
            }
        }
    }

    fn unmount_all(&self) {
        let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
        let prefix = self.dir.to_string_lossy().to_string();
        let mut ours: Vec<&str> = mounts
            .lines()
            .filter_map(|l| l.split_whitespace().nth(1))
            .filter(|m| m.starts_with(&prefix))
            .collect();
        ours.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in ours {
            let _ = Command::new("umount")
                .arg("-l")
                .arg(m)
                .stderr(Stdio::null())
                .status();
        }
    }
}

fn walk(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![root.to_path_buf()];
    let mut i = 0;
    while i < out.len() {
        if let Ok(rd) = std::fs::read_dir(&out[i]) {
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    out.push(e.path());
                }
            }
        }
        i += 1;
    }
    out
}

impl Drop for Fixture {
    fn drop(&mut self) {
        for c in self.children.iter_mut().rev() {
            let _ = c.kill();
            let _ = c.wait();
        }
        // shims outlive containerd; stop the ones of this fixture
        if let Ok(out) = Command::new("pgrep")
            .args([
                "-f",
                &format!(
                    "containerd-shim-runc-v2 .*-address {}",
                    self.socket.display()
                ),
            ])
            .output()
        {
            for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let _ = Command::new("kill").arg(pid).status();
            }
        }
        self.kill_fixture_cgroups();
        self.unmount_all();
        if std::env::var_os("INPLACE_KEEP_FIXTURE").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Concurrency seen by a [`SlowProxy`]: the most repositories that had a request in
/// flight at the same moment, and every repository seen.
#[derive(Debug, Default)]
pub struct ProxyStats {
    active: BTreeMap<String, usize>,
    pub max_concurrent_repos: usize,
    pub repos: BTreeSet<String>,
    pub requests: usize,
}

/// A loopback HTTP proxy in front of a registry that holds every request for `delay`
/// and records which repositories have requests in flight. One request per connection
/// (it asks the upstream to close), so request windows are exact.
#[derive(Debug)]
pub struct SlowProxy {
    pub addr: String,
    pub stats: Arc<Mutex<ProxyStats>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for SlowProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `/v2/<repo>/(manifests|blobs)/...` → `<repo>`.
pub fn repo_of_path(path: &str) -> Option<String> {
    let rest = path.strip_prefix("/v2/")?;
    let cut = rest.find("/manifests/").or_else(|| rest.find("/blobs/"))?;
    Some(rest[..cut].to_string())
}

async fn read_head(s: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    let mut b = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut b).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&b[..n]);
        if buf.len() > 64 * 1024 {
            break;
        }
    }
    Ok(buf)
}

fn with_close(head: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(head);
    let (h, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut out: Vec<&str> = h
        .split("\r\n")
        .filter(|l| !l.to_ascii_lowercase().starts_with("connection:"))
        .collect();
    out.push("Connection: close");
    format!("{}\r\n\r\n{}", out.join("\r\n"), rest).into_bytes()
}

async fn proxy_one(
    mut client: TcpStream,
    upstream: String,
    delay: Duration,
    stats: Arc<Mutex<ProxyStats>>,
) {
    let Ok(head) = read_head(&mut client).await else {
        return;
    };
    let path = String::from_utf8_lossy(&head)
        .split_whitespace()
        .nth(1)
        .unwrap_or("")
        .to_string();
    let repo = repo_of_path(&path);
    if let Some(r) = &repo {
        let mut s = stats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *s.active.entry(r.clone()).or_default() += 1;
        s.requests += 1;
        s.repos.insert(r.clone());
        let now = s.active.values().filter(|c| **c > 0).count();
        s.max_concurrent_repos = s.max_concurrent_repos.max(now);
    }
    tokio::time::sleep(delay).await;
    if let Ok(mut up) = TcpStream::connect(&upstream).await
        && up.write_all(&with_close(&head)).await.is_ok()
    {
        let _ = tokio::io::copy(&mut up, &mut client).await;
    }
    let _ = client.shutdown().await;
    if let Some(r) = repo {
        let mut s = stats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(c) = s.active.get_mut(&r) {
            *c = c.saturating_sub(1);
        }
    }
}

impl SlowProxy {
    pub async fn start(upstream: &str, delay: Duration) -> Result<Self, FixtureError> {
        let l = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| err(e.to_string()))?;
        let addr = l.local_addr().map_err(|e| err(e.to_string()))?.to_string();
        let stats = Arc::new(Mutex::new(ProxyStats::default()));
        let st = stats.clone();
        let upstream = upstream.to_string();
        let task = tokio::spawn(async move {
            while let Ok((c, _)) = l.accept().await {
                tokio::spawn(proxy_one(c, upstream.clone(), delay, st.clone()));
            }
        });
        Ok(Self { addr, stats, task })
    }

    pub fn max_concurrent_repos(&self) -> usize {
        self.stats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .max_concurrent_repos
    }

    pub fn repos_seen(&self) -> BTreeSet<String> {
        self.stats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .repos
            .clone()
    }
}

/// A loopback "registry" that accepts connections and never answers.
#[derive(Debug)]
pub struct BlackHole {
    pub addr: String,
    task: tokio::task::JoinHandle<()>,
}

impl BlackHole {
    pub async fn start() -> Result<Self, FixtureError> {
        let l = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| err(e.to_string()))?;
        let addr = l.local_addr().map_err(|e| err(e.to_string()))?.to_string();
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((c, _)) = l.accept().await {
                held.push(c);
            }
        });
        Ok(Self { addr, task })
    }
}

impl Drop for BlackHole {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Runs a host-network pod sandbox with one container `app` of `image` (env `PORT`),
/// directly through CRI; returns (sandbox id, container id).
pub async fn run_app(
    cri: &inplace_daemon::cri::CriClient,
    cgroup_parent: &str,
    name: &str,
    image: &str,
    port: u16,
) -> Result<(String, String), FixtureError> {
    use k8s_cri::v1::{
        ContainerConfig, ContainerMetadata, CreateContainerRequest, ImageSpec, KeyValue,
        LinuxPodSandboxConfig, LinuxSandboxSecurityContext, NamespaceMode, NamespaceOption,
        PodSandboxConfig, PodSandboxMetadata, RunPodSandboxRequest, StartContainerRequest,
    };
    let e = |s: tonic::Status| err(format!("{}: {}", s.code(), s.message()));
    let mut rt = cri.runtime_client();
    let cfg = PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.into(),
            uid: format!("testkit-{name}-{}", rand::random::<u32>()),
            namespace: "inplace-testkit".into(),
            attempt: 0,
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
    };
    let sb = rt
        .run_pod_sandbox(RunPodSandboxRequest {
            config: Some(cfg.clone()),
            runtime_handler: String::new(),
        })
        .await
        .map_err(e)?
        .into_inner()
        .pod_sandbox_id;
    let c = rt
        .create_container(CreateContainerRequest {
            pod_sandbox_id: sb.clone(),
            config: Some(ContainerConfig {
                metadata: Some(ContainerMetadata {
                    name: "app".into(),
                    attempt: 0,
                }),
                image: Some(ImageSpec {
                    image: image.into(),
                    ..Default::default()
                }),
                envs: vec![KeyValue {
                    key: "PORT".into(),
                    value: port.to_string(),
                }],
                ..Default::default()
            }),
            sandbox_config: Some(cfg),
        })
        .await
        .map_err(e)?
        .into_inner()
        .container_id;
    rt.start_container(StartContainerRequest {
        container_id: c.clone(),
    })
    .await
    .map_err(e)?;
    Ok((sb, c))
}

/// Stops and removes a pod sandbox and its containers.
pub async fn remove_sandbox(
    cri: &inplace_daemon::cri::CriClient,
    id: &str,
) -> Result<(), FixtureError> {
    use k8s_cri::v1::{RemovePodSandboxRequest, StopPodSandboxRequest};
    let e = |s: tonic::Status| err(format!("{}: {}", s.code(), s.message()));
    let mut rt = cri.runtime_client();
    rt.stop_pod_sandbox(StopPodSandboxRequest {
        pod_sandbox_id: id.into(),
    })
    .await
    .map_err(e)?;
    rt.remove_pod_sandbox(RemovePodSandboxRequest {
        pod_sandbox_id: id.into(),
    })
    .await
    .map_err(e)?;
    Ok(())
}
