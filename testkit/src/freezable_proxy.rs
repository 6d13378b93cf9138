//! A TCP proxy to an API server that can be frozen, for tests that cut a component off
//! the API server.
//!
//! While frozen it forwards no byte in either direction and leaves new connections
//! unanswered: a network partition that keeps connections open, so requests hang instead
//! of failing. Thawed, it forwards what it held. It counts what the client sent while
//! frozen, so a test can wait until a request is held.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::watch;

#[derive(Debug)]
pub struct FreezableProxy {
    kubeconfig: PathBuf,
    frozen: Arc<watch::Sender<bool>>,
    /// What the client sent while frozen: bytes of open connections, plus one per new
    /// connection.
    held: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl FreezableProxy {
    /// Listens on a free loopback port in front of the `https://` server of the kubeconfig
    /// at `kubeconfig`, and writes a copy of that kubeconfig naming the proxy instead.
    pub async fn start(kubeconfig: &Path) -> io::Result<Self> {
        let invalid = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_owned());
        let text = std::fs::read_to_string(kubeconfig)?;
        let server = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("server: "))
            .ok_or_else(|| invalid("no server in the kubeconfig"))?
            .trim()
            .to_owned();
        let upstream = server
            .strip_prefix("https://")
            .ok_or_else(|| invalid("the kubeconfig's server is not https://"))?
            .trim_end_matches('/')
            .to_owned();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let dir = tempfile::Builder::new()
            .prefix("inplace-api-proxy")
            .tempdir()?;
        let proxied = dir.path().join("kubeconfig");
        std::fs::write(
            &proxied,
            text.replace(&server, &format!("https://127.0.0.1:{port}")),
        )?;
        let (tx, rx) = watch::channel(false);
        let held = Arc::new(AtomicU64::new(0));
        let counter = held.clone();
        let task = tokio::spawn(async move {
            while let Ok((down, _)) = listener.accept().await {
                let (upstream, rx, counter) = (upstream.clone(), rx.clone(), counter.clone());
                tokio::spawn(async move {
                    if *rx.borrow() {
                        counter.fetch_add(1, Ordering::Relaxed);
                    }
                    thawed(rx.clone()).await;
                    let Ok(up) = tokio::net::TcpStream::connect(&upstream).await else {
                        return;
                    };
                    let (dr, dw) = down.into_split();
                    let (ur, uw) = up.into_split();
                    tokio::join!(
                        pump(dr, uw, rx.clone(), Some(counter)),
                        pump(ur, dw, rx, None)
                    );
                });
            }
        });
        Ok(Self {
            kubeconfig: proxied,
            frozen: Arc::new(tx),
            held,
            task,
            _dir: dir,
        })
    }

    /// The kubeconfig that reaches the API server through this proxy.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    pub fn freeze(&self) {
        self.frozen.send_replace(true);
    }

    pub fn thaw(&self) {
        self.frozen.send_replace(false);
    }

    /// What the client sent while frozen (bytes, plus one per new connection): non-zero
    /// once a request waits in the proxy.
    pub fn held_from_client(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }
}

impl Drop for FreezableProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Returns once the proxy is not frozen.
async fn thawed(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|frozen| !frozen).await;
}

/// Copies `from` to `to`, holding each chunk while the proxy is frozen (and counting its
/// bytes in `held`, when given).
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    rx: watch::Receiver<bool>,
    held: Option<Arc<AtomicU64>>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some(held) = &held
            && *rx.borrow()
        {
            held.fetch_add(n as u64, Ordering::Relaxed);
        }
        thawed(rx.clone()).await;
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}
