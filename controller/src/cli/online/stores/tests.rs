#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{Request, Response, StatusCode};
use serde_json::{Value, json};

use super::*;
use crate::cli::online::{Scope, get};

fn pod(name: &str, ready: bool) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": "2",
            "labels": {"app": "demo", "controller-revision-hash": "demo-new"},
            "ownerReferences": [{"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
                "name": "demo", "uid": "u1", "controller": true}]},
        "spec": {"containers": [{"name": "main", "image": "reg/app:v2"}]},
        "status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": if ready { "True" } else { "False" }}]}})
}

fn pod_object(name: &str, ready: bool) -> Pod {
    serde_json::from_value(pod(name, ready)).unwrap()
}

#[test]
fn a_store_replaces_its_contents_at_init_done() {
    let mut s: Store<Pod> = Store::default();
    assert!(!s.filled());
    s.apply(watcher::Event::Init);
    s.apply(watcher::Event::InitApply(pod_object("a", true)));
    assert!(s.objects().is_empty(), "not shown before InitDone");
    s.apply(watcher::Event::InitDone);
    assert!(s.filled());
    s.apply(watcher::Event::Apply(pod_object("b", true)));
    s.apply(watcher::Event::Apply(pod_object("a", false)));
    let names = |s: &Store<Pod>| -> Vec<String> {
        s.objects()
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect()
    };
    assert_eq!(names(&s), ["a", "b"]);
    s.apply(watcher::Event::Delete(pod_object("b", true)));
    assert_eq!(names(&s), ["a"]);
    // A re-list after a broken watch: what it does not list is gone.
    s.apply(watcher::Event::Init);
    s.apply(watcher::Event::InitApply(pod_object("c", true)));
    assert_eq!(names(&s), ["a"], "the old contents stay until InitDone");
    s.apply(watcher::Event::InitDone);
    assert_eq!(names(&s), ["c"]);
}

fn failure() -> watcher::Error {
    watcher::Error::NoResourceVersion
}

#[test]
fn stores_are_ready_when_every_watched_kind_filled_node_images_optional() {
    let mut s = Stores::new(&[Kind::CloneSet, Kind::Pod, Kind::NodeImage]);
    s.apply(Change::CloneSet(Box::new(watcher::Event::InitDone)))
        .unwrap();
    assert!(!s.ready());
    s.apply(Change::Pod(Box::new(watcher::Event::InitDone)))
        .unwrap();
    assert!(!s.ready(), "NodeImages neither filled nor given up");
    s.apply(Change::Failed(Kind::NodeImage, failure())).unwrap();
    assert!(s.ready(), "NodeImages given up after a failure");
    // A needed kind failing before it filled is the command's error; after, the watcher
    // retries.
    let mut s = Stores::new(&[Kind::CloneSet, Kind::Pod]);
    assert!(matches!(
        s.apply(Change::Pod(Box::new(watcher::Event::Init)))
            .and_then(|()| s.apply(Change::Failed(Kind::Pod, failure()))),
        Err(OnlineError::Watch(_))
    ));
    s.apply(Change::Pod(Box::new(watcher::Event::InitDone)))
        .unwrap();
    s.apply(Change::Failed(Kind::Pod, failure())).unwrap();
}

/// The loop renders from the stores after each event that changes the view, and prints
/// only changed frames; it has no client, so nothing but the events feeds it.
#[tokio::test]
async fn follow_renders_each_change_from_the_stores() {
    let events = vec![
        Change::Pod(Box::new(watcher::Event::Init)),
        Change::Pod(Box::new(watcher::Event::InitApply(pod_object("a", true)))),
        Change::Pod(Box::new(watcher::Event::InitDone)),
        Change::Pod(Box::new(watcher::Event::Apply(pod_object("b", false)))),
        Change::Pod(Box::new(watcher::Event::Apply(pod_object("b", false)))),
        Change::Pod(Box::new(watcher::Event::Apply(pod_object("b", true)))),
        Change::Pod(Box::new(watcher::Event::Delete(pod_object("a", true)))),
    ];
    let render = |s: &Stores| {
        Ok(s.pods
            .objects()
            .iter()
            .map(|p| {
                format!(
                    "{}={}",
                    p.metadata.name.clone().unwrap(),
                    p.status.as_ref().unwrap().conditions.as_ref().unwrap()[0].status
                )
            })
            .collect::<Vec<_>>()
            .join(",")
            + "\n")
    };
    let mut out = Vec::new();
    let end = follow(
        futures::stream::iter(events),
        Stores::new(&[Kind::Pod]),
        render,
        Framing {
            output: None,
            terminal: false,
        },
        "pods",
        &mut out,
    )
    .await;
    assert!(matches!(end, Err(OnlineError::WatchEnded(_))), "{end:?}");
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "a=True\n\na=True,b=False\n\na=True,b=True\n\nb=True\n"
    );
}

/// A fake API server: answers LISTs from `lists` (by path), the first WATCH of a path with
/// `watches` (JSON lines, once every path of `lists` was listed; then the stream ends), and
/// never answers a later WATCH (the watcher waits on it). Records every request as
/// `VERB path`.
#[derive(Clone)]
struct FakeServer {
    lists: Arc<Vec<(&'static str, Value)>>,
    watches: Arc<Vec<(&'static str, Vec<Value>)>>,
    seen: Arc<Mutex<Vec<String>>>,
}

impl FakeServer {
    fn client(&self) -> kube::Client {
        let server = self.clone();
        let service = tower::service_fn(move |req: Request<kube::client::Body>| {
            let server = server.clone();
            let path = req.uri().path().to_owned();
            let watching = req.uri().query().unwrap_or_default().contains("watch=true");
            async move { server.answer(path, watching).await }
        });
        kube::Client::new(service, "ns")
    }

    async fn answer(
        &self,
        path: String,
        watching: bool,
    ) -> Result<Response<kube::client::Body>, std::convert::Infallible> {
        let verb = if watching { "WATCH" } else { "LIST" };
        let earlier = {
            let mut seen = self.seen.lock().unwrap();
            let line = format!("{verb} {path}");
            let n = seen.iter().filter(|l| **l == line).count();
            seen.push(line);
            n
        };
        let body = if watching {
            if earlier > 0 {
                futures::future::pending::<()>().await;
            }
            // Events come once every kind was listed, so that the first view is the lists'.
            while !self.lists.iter().all(|(p, _)| {
                let seen = self.seen.lock().unwrap();
                seen.iter().any(|l| *l == format!("LIST {p}"))
            }) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            self.watches
                .iter()
                .find(|(p, _)| *p == path)
                .map(|(_, events)| events.iter().map(|e| format!("{e}\n")).collect::<String>())
                .unwrap_or_default()
        } else {
            match self.lists.iter().find(|(p, _)| *p == path) {
                Some((_, items)) => {
                    json!({"metadata": {"resourceVersion": "1"}, "items": items}).to_string()
                }
                None => {
                    return Ok(Response::builder()
                        .status(StatusCode::NOT_FOUND)
                        .body(kube::client::Body::from(
                            json!({"kind": "Status", "code": 404, "message": "no such path"})
                                .to_string()
                                .into_bytes(),
                        ))
                        .unwrap());
                }
            }
        };
        Ok(Response::builder()
            .status(StatusCode::OK)
            .body(kube::client::Body::from(body.into_bytes()))
            .unwrap())
    }
}

const CLONESETS: &str = "/apis/apps.kruise.io/v1alpha1/namespaces/ns/clonesets";
const PODS: &str = "/api/v1/namespaces/ns/pods";
const REVISIONS: &str = "/apis/apps/v1/namespaces/ns/controllerrevisions";
const NODE_IMAGES: &str = "/apis/apps.kruise.io/v1beta1/nodeimages";

fn demo() -> Value {
    json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
        "metadata": {"name": "demo", "namespace": "ns", "uid": "u1", "generation": 1,
            "resourceVersion": "1"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "demo"}},
            "template": {"metadata": {"labels": {"app": "demo"}},
                "spec": {"containers": [{"name": "main", "image": "reg/app:v2"}]}}},
        "status": {"observedGeneration": 1, "replicas": 3, "readyReplicas": 1,
            "updatedReplicas": 1, "updatedReadyReplicas": 1, "updateRevision": "demo-new",
            "currentRevision": "demo-old"}})
}

/// `get NAME --watch` against the fake server: every pod event is drawn, and each kind
/// was listed exactly once (the watcher's initial LIST), however many events came.
#[tokio::test]
async fn get_watch_lists_each_kind_once_however_many_events() {
    let mut crash = pod("demo-2", false);
    crash["status"]["containerStatuses"] = json!([{"name": "main", "ready": false,
        "restartCount": 3, "image": "reg/app:v2", "imageID": "",
        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}}}]);
    let server = FakeServer {
        lists: Arc::new(vec![
            (CLONESETS, json!([demo()])),
            (PODS, json!([pod("demo-0", true)])),
            (REVISIONS, json!([])),
            (NODE_IMAGES, json!([])),
        ]),
        watches: Arc::new(vec![(
            PODS,
            vec![
                json!({"type": "ADDED", "object": pod("demo-1", false)}),
                json!({"type": "MODIFIED", "object": pod("demo-1", true)}),
                json!({"type": "ADDED", "object": crash}),
            ],
        )]),
        seen: Arc::default(),
    };
    let client = server.client();
    let mut out = Vec::new();
    let ran = tokio::time::timeout(
        Duration::from_secs(3),
        get(
            &client,
            "ns",
            &Scope::Named("demo".into()),
            true,
            Some(DataFormat::Json),
            false,
            &mut out,
        ),
    )
    .await;
    assert!(ran.is_err(), "the watch keeps going: {ran:?}");
    let text = String::from_utf8(out).unwrap();
    let frames: Vec<Value> = serde_json::Deserializer::from_str(&text)
        .into_iter::<Value>()
        .collect::<Result<_, _>>()
        .unwrap();
    let pods_of = |f: &Value| -> Vec<(String, bool)> {
        f["pods"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["name"].as_str().unwrap().to_owned(), p["ready"] == true))
            .collect()
    };
    let drawn: Vec<Vec<(String, bool)>> = frames.iter().map(pods_of).collect();
    let p = |n: &str, r: bool| (n.to_owned(), r);
    assert_eq!(
        drawn,
        [
            vec![p("demo-0", true)],
            vec![p("demo-0", true), p("demo-1", false)],
            vec![p("demo-0", true), p("demo-1", true)],
            vec![p("demo-0", true), p("demo-1", true), p("demo-2", false)],
        ],
        "{text}"
    );
    let last = frames.last().unwrap();
    assert!(
        last["waiting"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["pod"] == "demo-2"
                && w["why"] == "container main: CrashLoopBackOff: back-off 40s"),
        "{last}"
    );
    let seen = server.seen.lock().unwrap().clone();
    for path in [CLONESETS, PODS, REVISIONS, NODE_IMAGES] {
        let lists = seen
            .iter()
            .filter(|l| **l == format!("LIST {path}"))
            .count();
        assert_eq!(lists, 1, "{path}: {seen:#?}");
        assert!(
            seen.iter().any(|l| *l == format!("WATCH {path}")),
            "{path} not watched: {seen:#?}"
        );
    }
}

/// A writer the test can read while `get --watch` is still writing to it.
#[derive(Clone, Default)]
struct SharedOut(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for SharedOut {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl SharedOut {
    /// The last complete JSON frame written so far.
    fn last_frame(&self) -> Option<Value> {
        let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
        serde_json::Deserializer::from_str(&text)
            .into_iter::<Value>()
            .map_while(Result::ok)
            .last()
    }
}

/// The issue counted ~30,000 LISTs for a 1,000-pod rollout: `get -w` listed every kind again
/// on each event. A rollout of `N` pods seen through `get NAME -w` against the counting fake
/// server: events of every watched kind (each pod added not ready and then made ready, with
/// its node's image pull going from pulling to done, the CloneSet's status counting up, the
/// new revision appearing), more than four per pod. The final view is drawn from the events
/// alone, and each of the four kinds was listed exactly once.
#[tokio::test]
async fn get_watch_of_a_rollout_lists_each_kind_once_for_events_of_every_kind() {
    const N: usize = 60;
    let on_node = |name: &str, ready: bool| {
        let mut p = pod(name, ready);
        p["spec"]["nodeName"] = json!("n1");
        p
    };
    let pod_events: Vec<Value> = (0..N)
        .flat_map(|i| {
            let name = format!("demo-{i:03}");
            [
                json!({"type": "ADDED", "object": on_node(&name, false)}),
                json!({"type": "MODIFIED", "object": on_node(&name, true)}),
            ]
        })
        .collect();
    let cloneset_events: Vec<Value> = (1..=N)
        .map(|k| {
            let mut cs = demo();
            cs["spec"]["replicas"] = json!(N);
            cs["status"] = json!({"observedGeneration": 1, "replicas": N, "readyReplicas": k,
                "updatedReplicas": k, "updatedReadyReplicas": k,
                "updateRevision": "demo-new", "currentRevision": "demo-old"});
            json!({"type": "MODIFIED", "object": cs})
        })
        .collect();
    let owner = json!([{"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
        "name": "demo", "uid": "u1", "controller": true}]);
    let revision = |name: &str, number: i64, image: &str| {
        json!({"apiVersion": "apps/v1", "kind": "ControllerRevision",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": "3",
                "ownerReferences": owner},
            "revision": number,
            "data": {"spec": {"template": {"$patch": "replace",
                "metadata": {"labels": {"app": "demo"}},
                "spec": {"containers": [{"name": "main", "image": image}]}}}}})
    };
    let node_image = |phase: &str, progress: i32| {
        json!({"type": "MODIFIED", "object": {
            "apiVersion": "apps.kruise.io/v1beta1", "kind": "NodeImage",
            "metadata": {"name": "n1", "resourceVersion": "4"}, "spec": {},
            "status": {"desired": 1, "imageStatuses": {
                "reg/app": {"tags": [{"tag": "v2", "phase": phase, "progress": progress}]}}}}})
    };
    let node_image_events: Vec<Value> = (1..N)
        .map(|i| node_image("Pulling", i32::try_from(i * 100 / N).unwrap()))
        .chain([node_image("Succeeded", 100)])
        .collect();
    let events = pod_events.len() + cloneset_events.len() + node_image_events.len() + 1;
    let server = FakeServer {
        lists: Arc::new(vec![
            (CLONESETS, json!([demo()])),
            (PODS, json!([])),
            (REVISIONS, json!([revision("demo-old", 1, "reg/app:v1")])),
            (NODE_IMAGES, json!([])),
        ]),
        watches: Arc::new(vec![
            (PODS, pod_events),
            (CLONESETS, cloneset_events),
            (
                REVISIONS,
                vec![json!({"type": "ADDED", "object": revision("demo-new", 2, "reg/app:v2")})],
            ),
            (NODE_IMAGES, node_image_events),
        ]),
        seen: Arc::default(),
    };
    assert!(events > 4 * N, "{events} events");

    // The view the last event leaves: every pod updated, ready and its image pulled, the
    // CloneSet's counters at N, the new revision holding every pod.
    let settled = |v: &Value| {
        let pods = v["pods"].as_array().map(Vec::as_slice).unwrap_or_default();
        pods.len() == N
            && pods.iter().all(|p| {
                p["ready"] == true
                    && p["updated"] == true
                    && p["imagePulls"] == json!(["Succeeded"])
            })
            && v["status"]["updatedReady"] == json!(N)
            && v["revisions"]
                .as_array()
                .is_some_and(|r| r.iter().any(|r| r["number"] == 2 && r["pods"] == json!(N)))
    };
    let client = server.client();
    let out = SharedOut::default();
    let mut writer = out.clone();
    let scope = Scope::Named("demo".into());
    let watching = get(
        &client,
        "ns",
        &scope,
        true,
        Some(DataFormat::Json),
        false,
        &mut writer,
    );
    let drawn = async {
        while !out.last_frame().is_some_and(|v| settled(&v)) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let ran = tokio::time::timeout(Duration::from_secs(30), async {
        tokio::select! {
            end = watching => panic!("the watch ended: {end:?}"),
            () = drawn => {}
        }
    })
    .await;
    assert!(
        ran.is_ok(),
        "the final view was not drawn in 30 s; last frame: {:?}",
        out.last_frame()
    );
    let seen = server.seen.lock().unwrap().clone();
    for path in [CLONESETS, PODS, REVISIONS, NODE_IMAGES] {
        let count = |verb: &str| {
            seen.iter()
                .filter(|l| **l == format!("{verb} {path}"))
                .count()
        };
        assert_eq!(count("LIST"), 1, "{path} over {events} events: {seen:#?}");
        assert!(count("WATCH") >= 1, "{path} not watched: {seen:#?}");
    }
}

/// `get` without a name, `-A`: one LIST per kind across namespaces, a row per CloneSet.
#[tokio::test]
async fn get_all_namespaces_lists_clonesets_and_pods_once() {
    let server = FakeServer {
        lists: Arc::new(vec![
            ("/apis/apps.kruise.io/v1alpha1/clonesets", json!([demo()])),
            ("/api/v1/pods", json!([pod("demo-0", true)])),
        ]),
        watches: Arc::new(vec![]),
        seen: Arc::default(),
    };
    let client = server.client();
    let mut out = Vec::new();
    get(
        &client,
        "ns",
        &Scope::List {
            all_namespaces: true,
            selector: Some("app=demo".into()),
        },
        false,
        None,
        false,
        &mut out,
    )
    .await
    .unwrap();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "NAMESPACE  NAME  DESIRED  UPDATED  UPDATED_READY  READY  TOTAL  WAITING\n\
         ns         demo  3        1        1              1      3      -\n"
    );
    assert_eq!(
        *server.seen.lock().unwrap(),
        [
            "LIST /apis/apps.kruise.io/v1alpha1/clonesets",
            "LIST /api/v1/pods"
        ]
    );
}

/// `rollout status` against the fake server: the CloneSet and the pods are each listed
/// once; the reason the rollout waits is printed under the progress line, and the rollout
/// ends when a watch event of the CloneSet says it is done.
#[tokio::test]
async fn rollout_status_watches_and_says_why_it_waits() {
    let mut done = demo();
    done["status"] = json!({"observedGeneration": 1, "replicas": 3, "readyReplicas": 3,
        "availableReplicas": 3, "updatedReplicas": 3, "updatedReadyReplicas": 3,
        "updateRevision": "demo-new", "currentRevision": "demo-new"});
    done["metadata"]["resourceVersion"] = json!("3");
    let server = FakeServer {
        lists: Arc::new(vec![
            (CLONESETS, json!([demo()])),
            (PODS, json!([pod("demo-0", true), pod("demo-1", false)])),
        ]),
        watches: Arc::new(vec![(
            CLONESETS,
            vec![json!({"type": "MODIFIED", "object": done})],
        )]),
        seen: Arc::default(),
    };
    let client = server.client();
    let mut out = Vec::new();
    crate::cli::online::rollout_status(&client, "ns", "demo", Duration::from_secs(5), &mut out)
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "updated 1/3, ready 1, available 0\n\
         waiting: maxUnavailable reached: 1 unavailable of 1 allowed\n\
         updated 3/3, ready 3, available 3\n\
         cloneset demo successfully rolled out\n"
    );
    let seen = server.seen.lock().unwrap().clone();
    for path in [CLONESETS, PODS] {
        let lists = seen
            .iter()
            .filter(|l| **l == format!("LIST {path}"))
            .count();
        assert_eq!(lists, 1, "{path}: {seen:#?}");
    }
}
