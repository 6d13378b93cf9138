use super::*;
use inplace_proto::imagepulljob::{
    CompletionPolicy, ImagePullJobNodeSelector, ImagePullJobPodSelector, ImagePullJobSpec,
};
use inplace_proto::nodeimage::{ImageStatus, ImageTagStatus, NodeImageSpec, NodeImageStatus};
use k8s_openapi::api::core::v1::{PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

const IMG: &str = "127.0.0.1:5000/inplace-test/app";

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + s).unwrap()
}

fn job(f: impl FnOnce(&mut ImagePullJobSpec)) -> ImagePullJob {
    let mut spec = ImagePullJobSpec {
        image: format!("{IMG}:v3"),
        ..ImagePullJobSpec::default()
    };
    f(&mut spec);
    let mut j = ImagePullJob::new("pull", spec);
    j.metadata.namespace = Some("ns".into());
    j.metadata.uid = Some("job-uid".into());
    j
}

fn node(name: &str, zone: &str) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(BTreeMap::from([("zone".into(), zone.into())])),
            ..ObjectMeta::default()
        },
        ..Node::default()
    }
}

fn nodes() -> Vec<Node> {
    vec![node("n1", "a"), node("n2", "a"), node("n3", "b")]
}

/// A NodeImage listing the job's tag (owned by `owner`), with a status phase if given.
fn ni(name: &str, owner: &str, phase: Option<(ImagePullPhase, &str)>) -> NodeImage {
    let tag = ImageTagSpec {
        tag: "v3".into(),
        owner_references: vec![ObjectReference {
            uid: Some(owner.into()),
            ..ObjectReference::default()
        }],
        ..ImageTagSpec::default()
    };
    let mut n = NodeImage::new(
        name,
        NodeImageSpec {
            images: BTreeMap::from([(
                IMG.to_string(),
                ImageSpec {
                    tags: vec![tag],
                    ..ImageSpec::default()
                },
            )]),
        },
    );
    n.metadata.resource_version = Some("7".into());
    if let Some((phase, msg)) = phase {
        n.status = Some(NodeImageStatus {
            image_statuses: BTreeMap::from([(
                IMG.to_string(),
                ImageStatus {
                    tags: vec![ImageTagStatus {
                        tag: "v3".into(),
                        phase,
                        message: msg.into(),
                        ..ImageTagStatus::default()
                    }],
                },
            )]),
            ..NodeImageStatus::default()
        });
    }
    n
}

fn run(
    j: &ImagePullJob,
    nis: Vec<NodeImage>,
    nodes: &[Node],
    pods: &[Pod],
    now: Timestamp,
) -> Plan {
    let map: BTreeMap<String, NodeImage> = nis.into_iter().map(|n| (n.name_any(), n)).collect();
    plan(&Input {
        job: j,
        node_images: &map,
        nodes,
        pods,
        now,
        ttl_jitter_seconds: 7,
    })
    .unwrap()
}

fn written(p: &Plan) -> Vec<(&str, bool)> {
    p.writes
        .iter()
        .map(|w| (w.node.as_str(), w.create))
        .collect()
}

#[test]
fn split_image_forms() {
    for (input, name, tag) in [
        ("nginx", "nginx", "latest"),
        ("nginx:1.25", "nginx", "1.25"),
        ("127.0.0.1:5000/a/b:v1", "127.0.0.1:5000/a/b", "v1"),
        ("127.0.0.1:5000/a/b", "127.0.0.1:5000/a/b", "latest"),
        ("r/a@sha256:0123", "r/a", "sha256:0123"),
    ] {
        assert_eq!(
            split_image(input),
            (name.to_string(), tag.to_string()),
            "{input}"
        );
    }
}

#[test]
fn target_node_selection() {
    let pod = |name: &str, node: &str, app: &str, phase: &str| Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            labels: Some(BTreeMap::from([("app".into(), app.into())])),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.into()),
            ..PodSpec::default()
        }),
        status: Some(PodStatus {
            phase: Some(phase.into()),
            ..PodStatus::default()
        }),
    };
    let pods = vec![
        pod("p1", "n3", "web", "Running"),
        pod("p2", "n1", "web", "Succeeded"),
        pod("p3", "n2", "db", "Running"),
    ];
    let cases: Vec<(&str, ImagePullJob, Vec<&str>)> = vec![
        ("all nodes", job(|_| {}), vec!["n1", "n2", "n3"]),
        (
            "names (unknown ignored)",
            job(|s| {
                s.selector = Some(ImagePullJobNodeSelector {
                    names: vec!["n3".into(), "gone".into(), "n1".into()],
                    ..ImagePullJobNodeSelector::default()
                })
            }),
            vec!["n1", "n3"],
        ),
        (
            "labels",
            job(|s| {
                s.selector = Some(ImagePullJobNodeSelector {
                    match_labels: Some(BTreeMap::from([("zone".into(), "a".into())])),
                    ..ImagePullJobNodeSelector::default()
                })
            }),
            vec!["n1", "n2"],
        ),
        (
            "pods: active ones only",
            job(|s| {
                s.pod_selector = Some(ImagePullJobPodSelector {
                    match_labels: Some(BTreeMap::from([("app".into(), "web".into())])),
                    ..ImagePullJobPodSelector::default()
                })
            }),
            vec!["n3"],
        ),
    ];
    let ns = nodes();
    for (what, j, want) in cases {
        let map = BTreeMap::new();
        let input = Input {
            job: &j,
            node_images: &map,
            nodes: &ns,
            pods: &pods,
            now: t(0),
            ttl_jitter_seconds: 0,
        };
        assert_eq!(target_nodes(&input).unwrap(), want, "{what}");
    }
}

/// (what, parallelism, NodeImages, NodeImages written (node, created), active)
type ParallelismCase = (
    &'static str,
    Option<i32>,
    Vec<NodeImage>,
    Vec<(&'static str, bool)>,
    i32,
);

#[test]
fn parallelism_bounds_new_tags_per_reconcile() {
    let cases: Vec<ParallelismCase> = vec![
        (
            "default 1, creates the NodeImage",
            None,
            vec![],
            vec![("n1", true)],
            1,
        ),
        (
            "2 of 3, existing NodeImage patched",
            Some(2),
            vec![NodeImage::new("n2", NodeImageSpec::default())],
            vec![("n1", true), ("n2", false)],
            2,
        ),
        ("paused", Some(0), vec![], vec![], 0),
        (
            "one active uses the only slot",
            Some(1),
            vec![ni("n1", "job-uid", Some((ImagePullPhase::Pulling, "")))],
            vec![],
            1,
        ),
        (
            "finished nodes free slots",
            Some(2),
            vec![
                ni("n1", "job-uid", Some((ImagePullPhase::Succeeded, ""))),
                ni("n2", "job-uid", None),
            ],
            vec![("n3", true)],
            2,
        ),
    ];
    for (what, par, nis, want, active) in cases {
        let j = job(|s| s.parallelism = par.map(IntOrString::Int));
        let p = run(&j, nis, &nodes(), &[], t(0));
        assert_eq!(written(&p), want, "{what}");
        assert_eq!(p.status.active, active, "{what}");
        assert_eq!(p.status.desired, 3, "{what}");
        assert!(p.status.completion_time.is_none(), "{what}");
        assert_eq!(p.status.start_time, Some(Time(t(0))), "{what}");
    }
}

#[test]
fn tag_entry_contents() {
    let j = job(|s| {
        s.pull_secrets = vec!["regcred".into()];
        s.image_pull_policy = Some(ImagePullPolicy::Always);
        s.completion_policy.active_deadline_seconds = Some(1200);
    });
    let p = run(&j, vec![], &nodes(), &[], t(5));
    let w = &p.writes[0];
    assert_eq!(w.image, IMG);
    assert_eq!(
        w.spec.pull_secrets,
        vec![ReferenceObject {
            namespace: "ns".into(),
            name: "regcred".into(),
            mode: None
        }]
    );
    let tag = &w.spec.tags[0];
    assert_eq!(tag.tag, "v3");
    assert_eq!(tag.created_at, Some(Time(t(5))));
    assert_eq!(tag.image_pull_policy, Some(ImagePullPolicy::Always));
    assert_eq!(tag.version, 0);
    let owner = &tag.owner_references[0];
    assert_eq!(owner.uid.as_deref(), Some("job-uid"));
    assert_eq!(owner.kind.as_deref(), Some("ImagePullJob"));
    assert_eq!(owner.name.as_deref(), Some("pull"));
    assert_eq!(owner.namespace.as_deref(), Some("ns"));
    assert_eq!(
        tag.pull_policy,
        Some(ImageTagPullPolicy {
            timeout_seconds: Some(600),
            backoff_limit: Some(3),
            ttl_seconds_after_finished: Some(1200 + 300 + 7),
            active_deadline_seconds: Some(1200),
        })
    );
    // startTime is now: look again when the deadline passes
    assert_eq!(p.requeue_after_seconds, Some(1200));
}

#[test]
fn tag_pull_policies() {
    let never = job(|s| {
        s.completion_policy.type_ = Some(CompletionPolicyType::Never);
        s.pull_policy = Some(inplace_proto::imagepulljob::PullPolicy {
            timeout_seconds: Some(3000),
            backoff_limit: Some(1),
        });
    });
    let p = tag_pull_policy(&never, -600);
    assert_eq!(p.ttl_seconds_after_finished, Some(86400 - 600));
    assert_eq!(p.active_deadline_seconds, Some(3000));
    let ttl = job(|s| s.completion_policy.ttl_seconds_after_finished = Some(60));
    assert_eq!(
        tag_pull_policy(&ttl, 0).ttl_seconds_after_finished,
        Some(360)
    );
    let plain = job(|_| {});
    let p = tag_pull_policy(&plain, 100);
    assert_eq!(p.ttl_seconds_after_finished, Some(600 * 3 + 300 + 100));
    assert_eq!(p.active_deadline_seconds, None);
}

#[test]
fn tag_of_another_job_gets_owner_and_new_version() {
    let j = job(|_| {});
    let other = ni("n1", "other-uid", Some((ImagePullPhase::Succeeded, "")));
    let p = run(&j, vec![other], &[node("n1", "a")], &[], t(0));
    assert_eq!(written(&p), vec![("n1", false)]);
    let tag = &p.writes[0].spec.tags[0];
    assert_eq!(tag.version, 1);
    let uids: Vec<_> = tag
        .owner_references
        .iter()
        .map(|o| o.uid.clone().unwrap())
        .collect();
    assert_eq!(uids, vec!["other-uid", "job-uid"]);
    assert_eq!(p.status.active, 1);
}

#[test]
fn completion() {
    use ImagePullPhase::{Failed, Pulling, Succeeded};
    let start = Some(Time(t(0)));
    let always = job(|s| s.parallelism = Some(IntOrString::Int(3)));
    let mut never = job(|s| {
        s.parallelism = Some(IntOrString::Int(3));
        s.completion_policy = CompletionPolicy {
            type_: Some(CompletionPolicyType::Never),
            ..CompletionPolicy::default()
        };
    });
    never.status = Some(ImagePullJobStatus {
        start_time: start.clone(),
        ..ImagePullJobStatus::default()
    });
    let mut deadline = job(|s| s.completion_policy.active_deadline_seconds = Some(100));
    deadline.status = never.status.clone();
    let finished = || {
        vec![
            ni(
                "n3",
                "job-uid",
                Some((Failed, "NotFound: not found (after 4 attempt(s))")),
            ),
            ni("n1", "job-uid", Some((Succeeded, ""))),
            ni("n2", "job-uid", Some((Failed, "boom"))),
        ]
    };
    // Always: all finished → complete
    let p = run(&always, finished(), &nodes(), &[], t(50));
    assert_eq!(p.status.completion_time, Some(Time(t(50))));
    assert_eq!(
        (p.status.succeeded, p.status.failed, p.status.active),
        (1, 2, 0)
    );
    assert_eq!(p.status.failed_nodes, vec!["n2", "n3"]);
    assert_eq!(
        p.status.message,
        "job has completed; failed on n2: boom; n3: NotFound: not found (after 4 attempt(s))"
    );
    // Never: same state, still running
    let p = run(&never, finished(), &nodes(), &[], t(50));
    assert!(p.status.completion_time.is_none());
    assert_eq!(p.status.start_time, start);
    assert!(
        p.status
            .message
            .starts_with("job is running, progress 100.0%")
    );
    // Never: a new node gets the tag
    let mut more = nodes();
    more.push(node("n4", "c"));
    let p = run(&never, finished(), &more, &[], t(50));
    assert_eq!(written(&p), vec![("n4", true)]);
    assert_eq!(p.status.desired, 4);
    // deadline not reached: running, nothing failed yet
    let pulling = || {
        vec![
            ni("n1", "job-uid", Some((Succeeded, ""))),
            ni("n2", "job-uid", Some((Pulling, ""))),
        ]
    };
    let p = run(&deadline, pulling(), &nodes(), &[], t(99));
    assert!(p.status.completion_time.is_none());
    assert_eq!(p.status.active, 1);
    assert_eq!(p.requeue_after_seconds, Some(1));
    // deadline reached: unfinished and not-started nodes fail, nothing new added
    let p = run(&deadline, pulling(), &nodes(), &[], t(100));
    assert!(p.writes.is_empty());
    assert_eq!(p.status.completion_time, Some(Time(t(100))));
    assert_eq!(
        (p.status.succeeded, p.status.failed, p.status.active),
        (1, 2, 0)
    );
    assert_eq!(p.status.failed_nodes, vec!["n2", "n3"]);
    assert_eq!(p.status.message, "job exceeds activeDeadlineSeconds");
}

#[test]
fn ttl_after_completion() {
    let mut j = job(|s| s.completion_policy.ttl_seconds_after_finished = Some(60));
    let done = ImagePullJobStatus {
        start_time: Some(Time(t(0))),
        completion_time: Some(Time(t(10))),
        desired: 1,
        succeeded: 1,
        message: "job has completed".into(),
        ..ImagePullJobStatus::default()
    };
    j.status = Some(done.clone());
    let p = run(&j, vec![], &nodes(), &[], t(30));
    assert!(!p.delete);
    assert!(p.writes.is_empty());
    assert_eq!(p.status, done);
    assert_eq!(p.requeue_after_seconds, Some(40));
    let p = run(&j, vec![], &nodes(), &[], t(70));
    assert!(p.delete);
    // no TTL: kept forever, status frozen
    j.spec.completion_policy.ttl_seconds_after_finished = None;
    let p = run(&j, vec![], &nodes(), &[], t(7000));
    assert!(!p.delete);
    assert_eq!(p.requeue_after_seconds, None);
}

#[test]
fn errors() {
    let mut j = job(|_| {});
    j.metadata.uid = None;
    let map = BTreeMap::new();
    let input = Input {
        job: &j,
        node_images: &map,
        nodes: &[],
        pods: &[],
        now: t(0),
        ttl_jitter_seconds: 0,
    };
    assert_eq!(plan(&input), Err(PlanError::NoUid));
    let j = job(|s| {
        s.selector = Some(ImagePullJobNodeSelector {
            match_labels: Some(BTreeMap::from([("bad key!".into(), "v".into())])),
            ..ImagePullJobNodeSelector::default()
        })
    });
    let input = Input { job: &j, ..input };
    assert!(matches!(plan(&input), Err(PlanError::NodeSelector(_))));
}

fn with_order(mut j: ImagePullJob, order: &str) -> ImagePullJob {
    j.metadata.annotations = Some(BTreeMap::from([(
        inplace_proto::keys::PREDOWNLOAD_NODE_ORDER_ANNOTATION.to_owned(),
        order.to_owned(),
    )]));
    j
}

/// (what, nodes waiting, recorded order, hand-out order)
type HandOutCase<'a> = (&'a str, &'a [&'a str], &'a [&'a str], &'a [&'a str]);

#[test]
fn hand_out_order_table() {
    let cases: &[HandOutCase] = &[
        ("no order: by name", &["a", "b", "c"], &[], &["a", "b", "c"]),
        (
            "listed first in list order",
            &["a", "b", "c"],
            &["c", "a"],
            &["c", "a", "b"],
        ),
        (
            "listed nodes no longer waiting are skipped",
            &["b", "d"],
            &["a", "d", "c"],
            &["d", "b"],
        ),
        (
            "a node listed twice counts at its first place",
            &["a", "b", "c"],
            &["b", "c", "b"],
            &["b", "c", "a"],
        ),
        ("nothing waiting", &[], &["a"], &[]),
    ];
    for (what, waiting, order, want) in cases {
        assert_eq!(hand_out_order(waiting, order), *want, "{what}");
    }
}

#[test]
fn recorded_node_order_reads_our_annotation() {
    let j = with_order(job(|_| {}), "n3, n1,,n2");
    assert_eq!(recorded_node_order(&j), vec!["n3", "n1", "n2"]);
    assert!(recorded_node_order(&job(|_| {})).is_empty());
}

#[test]
fn parallelism_slots_follow_the_recorded_order() {
    // (what, parallelism, recorded order, existing NodeImages, nodes written)
    type Case = (
        &'static str,
        i32,
        &'static str,
        Vec<NodeImage>,
        Vec<&'static str>,
    );
    let cases: Vec<Case> = vec![
        ("first listed node", 1, "n3,n1,n2", vec![], vec!["n3"]),
        ("two slots", 2, "n2,n3", vec![], vec!["n2", "n3"]),
        (
            "unlisted nodes after the listed ones, by name",
            3,
            "n3",
            vec![],
            vec!["n3", "n1", "n2"],
        ),
        (
            "an active listed node holds the slot; the next goes to the next listed",
            2,
            "n3,n2,n1",
            vec![ni("n3", "job-uid", Some((ImagePullPhase::Pulling, "")))],
            vec!["n2"],
        ),
        (
            "a node not targeted (no longer selected) is skipped",
            1,
            "gone,n2",
            vec![],
            vec!["n2"],
        ),
    ];
    for (what, par, order, nis, want) in cases {
        let j = with_order(job(|s| s.parallelism = Some(IntOrString::Int(par))), order);
        let p = run(&j, nis, &nodes(), &[], t(0));
        let got: Vec<&str> = p.writes.iter().map(|w| w.node.as_str()).collect();
        assert_eq!(got, want, "{what}");
    }
}

proptest::proptest! {
    /// Ordering changes only which nodes come first: over reconciles that each finish the
    /// nodes written before, every targeted node gets the tag exactly once, with or
    /// without a recorded order, and each reconcile writes `parallelism` nodes (or the
    /// rest).
    #[test]
    fn the_nodes_pulled_are_the_same_with_or_without_an_order(
        count in 1usize..12,
        par in 1i32..5,
        order in proptest::collection::vec(0usize..14, 0..14),
    ) {
        let names: Vec<String> = (0..count).map(|i| format!("n{i:02}")).collect();
        let all: Vec<Node> = names.iter().map(|n| node(n, "a")).collect();
        let order: Vec<String> = order.iter().map(|i| format!("n{i:02}")).collect();
        let mut pulled_by = Vec::new();
        for recorded in [None, Some(order.join(","))] {
            let mut j = job(|s| s.parallelism = Some(IntOrString::Int(par)));
            if let Some(o) = &recorded {
                j = with_order(j, o);
            }
            let mut done: Vec<NodeImage> = Vec::new();
            let mut pulled: Vec<String> = Vec::new();
            for _ in 0..count + 1 {
                let p = run(&j, done.clone(), &all, &[], t(0));
                let want = (count - pulled.len()).min(usize::try_from(par).unwrap());
                proptest::prop_assert_eq!(p.writes.len(), want);
                for w in &p.writes {
                    proptest::prop_assert!(!pulled.contains(&w.node), "{} twice", w.node);
                    pulled.push(w.node.clone());
                    done.push(ni(&w.node, "job-uid", Some((ImagePullPhase::Succeeded, ""))));
                }
            }
            if recorded.is_some() {
                // the listed nodes come first, in their order
                let mut listed: Vec<&String> = Vec::new();
                for o in &order {
                    if names.contains(o) && !listed.contains(&o) {
                        listed.push(o);
                    }
                }
                let head: Vec<&String> = pulled.iter().take(listed.len()).collect();
                proptest::prop_assert_eq!(head, listed);
            }
            pulled.sort();
            pulled_by.push(pulled);
        }
        proptest::prop_assert_eq!(&pulled_by[0], &names);
        proptest::prop_assert_eq!(&pulled_by[0], &pulled_by[1]);
    }
}
