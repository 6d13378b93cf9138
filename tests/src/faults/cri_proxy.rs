//! A byte proxy on the CRI socket: the node daemon talks to containerd through a unix
//! socket of this proxy, which, while faults are on, fails and holds its calls.
//!
//! CRI is gRPC over one HTTP/2 connection per client, so faults are made at the level of
//! connections, which is what a call meets when the runtime misbehaves:
//! - *cut*: every open connection is closed (the calls in flight fail, the client
//!   reconnects);
//! - *stall*: no byte moves in either direction for 0.5–5 s (the calls in flight hang,
//!   then complete);
//! - a new connection is *refused* (accepted and closed at once: the calls that made it
//!   fail) or *held* 0.5–3 s before it is connected to containerd.
//!
//! The decisions come from the run's seed: a driver draws one every 0.3–1.5 s of the
//! fault window (a cut with 15 %, a stall with 25 %), and each new connection draws its
//! own. The kubelet talks to containerd directly and is never faulted.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::watch;
use tokio::time::Instant;

use super::rng::Rng;

/// A fault the CRI proxy injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum CriFault {
    Cut,
    Stall,
    Refuse,
    Hold,
}

impl CriFault {
    pub fn name(self) -> &'static str {
        match self {
            CriFault::Cut => "cri-cut",
            CriFault::Stall => "cri-stall",
            CriFault::Refuse => "cri-refuse",
            CriFault::Hold => "cri-hold",
        }
    }
}

struct State {
    upstream: PathBuf,
    faults: AtomicBool,
    rng: Mutex<Rng>,
    counts: Mutex<BTreeMap<CriFault, u64>>,
    /// No byte moves before this instant.
    stalled_until: Mutex<Option<Instant>>,
    /// Bumped to close every open connection.
    cut: watch::Sender<u64>,
}

impl State {
    fn count(&self, f: CriFault) {
        if let Ok(mut c) = self.counts.lock() {
            *c.entry(f).or_default() += 1;
        }
    }

    fn draw<T>(&self, f: impl FnOnce(&mut Rng) -> T) -> Option<T> {
        self.rng.lock().ok().map(|mut r| f(&mut r))
    }

    fn stall_left(&self) -> Option<Duration> {
        let until = (*self.stalled_until.lock().ok()?)?;
        let now = Instant::now();
        (until > now).then(|| until - now)
    }
}

/// The proxy; stops when dropped.
pub struct CriProxy {
    socket: PathBuf,
    state: Arc<State>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl CriProxy {
    /// Listens on `socket` (removed first if it exists) and forwards to `upstream`.
    pub fn start(socket: &Path, upstream: &Path, rng: Rng) -> std::io::Result<CriProxy> {
        let _ = std::fs::remove_file(socket);
        let listener = UnixListener::bind(socket)?;
        let state = Arc::new(State {
            upstream: upstream.to_path_buf(),
            faults: AtomicBool::new(false),
            rng: Mutex::new(rng),
            counts: Mutex::new(BTreeMap::new()),
            stalled_until: Mutex::new(None),
            cut: watch::channel(0).0,
        });
        let accept = {
            let state = state.clone();
            tokio::spawn(async move {
                while let Ok((down, _)) = listener.accept().await {
                    tokio::spawn(connection(state.clone(), down));
                }
            })
        };
        let driver = tokio::spawn(drive(state.clone()));
        Ok(CriProxy {
            socket: socket.to_path_buf(),
            state,
            tasks: vec![accept, driver],
        })
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    pub fn set_faults(&self, on: bool) {
        self.state.faults.store(on, Ordering::SeqCst);
        if !on && let Ok(mut s) = self.state.stalled_until.lock() {
            *s = None;
        }
    }

    /// The faults injected so far, by kind.
    pub fn counts(&self) -> BTreeMap<CriFault, u64> {
        self.state
            .counts
            .lock()
            .map(|c| c.clone())
            .unwrap_or_default()
    }
}

impl std::fmt::Debug for CriProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CriProxy")
            .field("socket", &self.socket)
            .field("upstream", &self.state.upstream)
            .finish_non_exhaustive()
    }
}

impl Drop for CriProxy {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        // Open connections end with their peers; new ones find no listener.
        self.state.cut.send_modify(|g| *g += 1);
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// Draws the window's cuts and stalls.
async fn drive(state: Arc<State>) {
    loop {
        let pause = state.draw(|r| r.range(300, 1500)).unwrap_or(1000);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        if !state.faults.load(Ordering::SeqCst) {
            continue;
        }
        let Some((cut, stall, stall_ms)) =
            state.draw(|r| (r.chance(150), r.chance(250), r.range(500, 5000)))
        else {
            return;
        };
        if cut {
            state.cut.send_modify(|g| *g += 1);
            state.count(CriFault::Cut);
        } else if stall && state.stall_left().is_none() {
            if let Ok(mut s) = state.stalled_until.lock() {
                *s = Some(Instant::now() + Duration::from_millis(stall_ms));
            }
            state.count(CriFault::Stall);
        }
    }
}

async fn connection(state: Arc<State>, down: UnixStream) {
    if state.faults.load(Ordering::SeqCst) {
        let (refuse, hold, hold_ms) = state
            .draw(|r| (r.chance(150), r.chance(200), r.range(500, 3000)))
            .unwrap_or_default();
        if refuse {
            state.count(CriFault::Refuse);
            return;
        }
        if hold {
            state.count(CriFault::Hold);
            tokio::time::sleep(Duration::from_millis(hold_ms)).await;
        }
    }
    let Ok(up) = UnixStream::connect(&state.upstream).await else {
        return;
    };
    let mut cut = state.cut.subscribe();
    cut.mark_unchanged();
    let (down_r, down_w) = down.into_split();
    let (up_r, up_w) = up.into_split();
    let copy = async {
        tokio::select! {
            _ = pipe(&state, down_r, up_w) => {}
            _ = pipe(&state, up_r, down_w) => {}
        }
    };
    tokio::select! {
        () = copy => {}
        _ = cut.changed() => {}
    }
}

/// Copies `from` to `to`, holding each chunk while the proxy stalls.
async fn pipe(
    state: &State,
    mut from: impl tokio::io::AsyncRead + Unpin,
    mut to: impl tokio::io::AsyncWrite + Unpin,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            return to.shutdown().await;
        }
        while let Some(left) = state.stall_left() {
            tokio::time::sleep(left).await;
        }
        to.write_all(&buf[..n]).await?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A proxy in front of an echo server: bytes pass while faults are off, a cut closes
    /// an open connection, and a stall holds the bytes for a while.
    #[tokio::test]
    async fn forwards_cuts_and_stalls() -> Result<(), Box<dyn std::error::Error>> {
        let dir = std::env::temp_dir().join(format!("cri-proxy-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let upstream = dir.join("up.sock");
        let _ = std::fs::remove_file(&upstream);
        let echo = UnixListener::bind(&upstream)?;
        tokio::spawn(async move {
            while let Ok((mut s, _)) = echo.accept().await {
                tokio::spawn(async move {
                    let mut b = [0u8; 16];
                    while let Ok(n) = s.read(&mut b).await {
                        if n == 0 || s.write_all(&b[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        let proxy = CriProxy::start(&dir.join("proxy.sock"), &upstream, Rng::new(7))?;
        let mut c = UnixStream::connect(proxy.socket()).await?;
        c.write_all(b"ping").await?;
        let mut b = [0u8; 4];
        c.read_exact(&mut b).await?;
        assert_eq!(&b, b"ping");

        *proxy.state.stalled_until.lock().map_err(|_| "poisoned")? =
            Some(Instant::now() + Duration::from_millis(300));
        let t = Instant::now();
        c.write_all(b"pong").await?;
        c.read_exact(&mut b).await?;
        assert_eq!(&b, b"pong");
        assert!(
            t.elapsed() >= Duration::from_millis(250),
            "{:?}",
            t.elapsed()
        );

        proxy.state.cut.send_modify(|g| *g += 1);
        let n = tokio::time::timeout(Duration::from_secs(2), c.read(&mut b))
            .await?
            .unwrap_or(0);
        assert_eq!(n, 0, "the cut connection is closed");
        drop(proxy);
        let _ = std::fs::remove_dir_all(&dir);
        Ok(())
    }
}
