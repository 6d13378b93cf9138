use super::*;
use inplace_proto::imagelistpulljob::ImageListPullJobSpec;
use inplace_proto::imagepulljob::{CompletionPolicy, ImagePullJobStatus, ImagePullPolicy};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use proptest::prelude::*;

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + s).unwrap_or(Timestamp::UNIX_EPOCH)
}

fn list(images: &[&str]) -> ImageListPullJob {
    let mut l = ImageListPullJob::new(
        "warm",
        ImageListPullJobSpec {
            images: images.iter().map(|i| (*i).to_owned()).collect(),
            parallelism: Some(IntOrString::Int(2)),
            ..ImageListPullJobSpec::default()
        },
    );
    l.metadata.namespace = Some("ns".into());
    l.metadata.uid = Some("list-uid".into());
    l
}

/// A job of `l` for `image`, made from its current template, created at `t(created)`.
fn job_of(l: &ImageListPullJob, name: &str, image: &str, created: i64) -> ImagePullJob {
    let mut j = ImagePullJob::new(name, l.spec.job_spec(image));
    j.metadata.namespace = Some("ns".into());
    j.metadata.creation_timestamp = Some(Time(t(created)));
    j.metadata.labels = Some(BTreeMap::from([(
        TEMPLATE_HASH_LABEL.to_owned(),
        template_hash(l),
    )]));
    j
}

/// `job` with a started status: `(desired, active, succeeded, failed)`.
fn with_status(
    mut j: ImagePullJob,
    (desired, active, succeeded, failed): (i32, i32, i32, i32),
) -> ImagePullJob {
    j.status = Some(ImagePullJobStatus {
        start_time: Some(Time(t(0))),
        desired,
        active,
        succeeded,
        failed,
        ..ImagePullJobStatus::default()
    });
    j
}

fn run(l: &ImageListPullJob, jobs: &[ImagePullJob], now: i64) -> Plan {
    plan(&Input {
        list: l,
        jobs,
        now: t(now),
    })
}

fn images(p: &Plan) -> Vec<&str> {
    p.create.iter().map(|c| c.spec.image.as_str()).collect()
}

#[test]
fn a_new_list_creates_one_job_per_image_and_starts() {
    let l = list(&["a:1", "b:2"]);
    let p = run(&l, &[], 5);
    assert_eq!(images(&p), ["a:1", "b:2"]);
    for c in &p.create {
        assert_eq!(c.generate_name, "warm-");
        assert_eq!(c.hash, template_hash(&l));
        assert_eq!(c.spec.parallelism, Some(IntOrString::Int(2)));
    }
    assert!(p.delete.is_empty());
    assert!(!p.delete_list);
    assert_eq!(p.status.desired, 2);
    assert_eq!(p.status.start_time, Some(Time(t(5))));
    assert_eq!(p.status.completion_time, None);
}

#[test]
fn status_is_aggregated_over_started_jobs() {
    let l = list(&["a:1", "b:2", "c:3", "d:4"]);
    let jobs = [
        with_status(job_of(&l, "warm-a", "a:1", 0), (2, 1, 1, 0)), // active
        with_status(job_of(&l, "warm-b", "b:2", 0), (2, 0, 2, 0)), // succeeded
        with_status(job_of(&l, "warm-c", "c:3", 0), (2, 0, 1, 1)), // completed, failed
        job_of(&l, "warm-d", "d:4", 0),                            // not started
    ];
    let p = run(&l, &jobs, 9);
    assert!(p.create.is_empty() && p.delete.is_empty());
    let s = &p.status;
    assert_eq!(
        (s.desired, s.active, s.completed, s.succeeded),
        (4, 1, 2, 1)
    );
    assert_eq!(
        s.failed_image_statuses,
        [FailedImageStatus {
            image_pull_job: "warm-c".into(),
            name: "c:3".into(),
            message:
                "Please check for details which nodes failed by 'kubectl get ImagePullJob warm-c'."
                    .into(),
        }]
    );
    assert_eq!(s.completion_time, None);
}

#[test]
fn completes_when_every_job_finished_unless_never() {
    let mut l = list(&["a:1", "b:2"]);
    let jobs = [
        with_status(job_of(&l, "warm-a", "a:1", 0), (1, 0, 1, 0)),
        with_status(job_of(&l, "warm-b", "b:2", 0), (1, 0, 0, 1)),
    ];
    let p = run(&l, &jobs, 7);
    assert_eq!(p.status.completion_time, Some(Time(t(7))));
    assert_eq!((p.status.completed, p.status.succeeded), (2, 1));

    l.spec.completion_policy = CompletionPolicy {
        type_: Some(CompletionPolicyType::Never),
        ..CompletionPolicy::default()
    };
    let jobs = [
        with_status(job_of(&l, "warm-a", "a:1", 0), (1, 0, 1, 0)),
        with_status(job_of(&l, "warm-b", "b:2", 0), (1, 0, 1, 0)),
    ];
    let p = run(&l, &jobs, 7);
    assert_eq!(p.status.completion_time, None);
    assert_eq!(p.status.completed, 2);
}

#[test]
fn a_complete_list_is_left_alone_then_deleted_at_its_ttl() {
    // (ttl, now) -> (delete, requeue)
    let cases = [
        (None, 100, (false, None)),
        (Some(30), 10, (false, Some(20))),
        (Some(30), 29, (false, Some(1))),
        (Some(30), 30, (true, None)),
        (Some(0), 0, (true, None)),
        (Some(30), 500, (true, None)),
    ];
    for (ttl, now, want) in cases {
        let mut l = list(&["a:1", "new:9"]);
        l.spec.completion_policy.ttl_seconds_after_finished = ttl;
        let done = ImageListPullJobStatus {
            completion_time: Some(Time(t(0))),
            desired: 1,
            completed: 1,
            ..ImageListPullJobStatus::default()
        };
        l.status = Some(done.clone());
        let p = run(&l, &[], now);
        assert_eq!(
            (p.delete_list, p.requeue_after_seconds),
            want,
            "{ttl:?} {now}"
        );
        // nothing is created for the image added after completion, status unchanged
        assert!(p.create.is_empty() && p.delete.is_empty(), "{ttl:?} {now}");
        assert_eq!(p.status, done);
    }
}

#[test]
fn a_changed_list_deletes_removed_images_jobs_and_creates_new_ones() {
    let before = list(&["a:1", "b:2"]);
    let jobs = [
        with_status(job_of(&before, "warm-a", "a:1", 0), (1, 0, 1, 0)),
        with_status(job_of(&before, "warm-b", "b:2", 0), (1, 0, 1, 0)),
    ];
    let after = list(&["b:2", "c:3"]);
    let p = run(&after, &jobs, 3);
    assert_eq!(p.delete, ["warm-a"]);
    assert_eq!(images(&p), ["c:3"]);
    // a:1's finished job is not counted: c:3 is not pulled yet
    assert_eq!((p.status.desired, p.status.completed), (2, 1));
    assert_eq!(p.status.completion_time, None);
}

#[test]
fn a_changed_template_remakes_every_job() {
    let before = list(&["a:1", "b:2"]);
    let jobs = [
        job_of(&before, "warm-a", "a:1", 0),
        job_of(&before, "warm-b", "b:2", 0),
    ];
    let mut after = before.clone();
    after.spec.parallelism = Some(IntOrString::Int(5));
    assert_ne!(template_hash(&before), template_hash(&after));
    let p = run(&after, &jobs, 3);
    assert_eq!(p.delete, ["warm-a", "warm-b"]);
    assert_eq!(images(&p), ["a:1", "b:2"]);
    assert!(
        p.create
            .iter()
            .all(|c| c.spec.parallelism == Some(IntOrString::Int(5)))
    );
}

#[test]
fn a_job_with_another_hash_but_the_same_spec_is_kept() {
    // e.g. made by OpenKruise's controller before the takeover, its pull policy defaulted
    let l = list(&["a:1"]);
    let mut j = job_of(&l, "warm-a", "a:1", 0);
    j.metadata.labels = Some(BTreeMap::from([(
        TEMPLATE_HASH_LABEL.to_owned(),
        "5c4b8f9d7".to_owned(),
    )]));
    j.spec.image_pull_policy = Some(ImagePullPolicy::IfNotPresent);
    let p = run(&l, &[j.clone()], 1);
    assert!(p.create.is_empty() && p.delete.is_empty());
    j.spec.pull_secrets = vec!["other".into()];
    let p = run(&l, &[j], 1);
    assert_eq!(p.delete, ["warm-a"]);
    assert_eq!(images(&p), ["a:1"]);
}

#[test]
fn duplicates_keep_the_oldest_and_jobs_being_deleted_are_ignored() {
    let l = list(&["a:1", "b:2"]);
    let mut going = job_of(&l, "warm-b", "b:2", 0);
    going.metadata.deletion_timestamp = Some(Time(t(1)));
    let jobs = [
        job_of(&l, "warm-y", "a:1", 5),
        job_of(&l, "warm-x", "a:1", 2),
        going,
    ];
    let p = run(&l, &jobs, 6);
    assert_eq!(p.delete, ["warm-y"]);
    assert_eq!(images(&p), ["b:2"]);
}

#[test]
fn the_hash_is_safe_encoded_digits() {
    let h = template_hash(&list(&["a:1"]));
    assert!(!h.is_empty() && h.len() <= 10);
    assert!(
        h.bytes()
            .all(|b| b"bcdfghjklmnpqrstvwxz2456789".contains(&b)),
        "{h}"
    );
    // the images are not part of the template
    assert_eq!(h, template_hash(&list(&["z:9", "y:8"])));
    // the byte modulo the alphabet's length, as Go's SafeEncodeString
    assert_eq!(safe_encode("0123456789"), "456789bcdf");
}

proptest! {
    /// Whatever jobs exist, afterwards every listed image has exactly one kept or created
    /// job, no job of an unlisted image is kept, and the counts stay within `desired`.
    #[test]
    fn every_image_ends_with_exactly_one_job(
        listed in proptest::collection::btree_set(0u8..6, 1..5),
        existing in proptest::collection::vec((0u8..8, any::<bool>(), 0i32..3, 0i32..3, 0i32..3), 0..8),
    ) {
        let names: Vec<String> = listed.iter().map(|i| format!("img{i}:1")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let l = list(&refs);
        let mut other = l.clone();
        other.spec.parallelism = Some(IntOrString::Int(9));
        let jobs: Vec<ImagePullJob> = existing
            .iter()
            .enumerate()
            .map(|(n, (img, current, a, s, f))| {
                let tmpl = if *current { &l } else { &other };
                with_status(
                    job_of(tmpl, &format!("warm-{n}"), &format!("img{img}:1"), i64::try_from(n).unwrap_or(0)),
                    (a + s + f, *a, *s, *f),
                )
            })
            .collect();
        let p = run(&l, &jobs, 100);
        let deleted: BTreeSet<&str> = p.delete.iter().map(String::as_str).collect();
        let mut per_image: BTreeMap<String, usize> = BTreeMap::new();
        for j in jobs.iter().filter(|j| !deleted.contains(j.name_any().as_str())) {
            prop_assert!(names.contains(&j.spec.image), "kept {}", j.spec.image);
            *per_image.entry(j.spec.image.clone()).or_default() += 1;
        }
        for c in &p.create {
            *per_image.entry(c.spec.image.clone()).or_default() += 1;
        }
        for n in &names {
            prop_assert_eq!(per_image.get(n).copied(), Some(1), "{}", n);
        }
        let s = &p.status;
        prop_assert_eq!(usize::try_from(s.desired).ok(), Some(names.len()));
        prop_assert!(s.active <= s.desired && s.completed <= s.desired && s.succeeded <= s.completed);
        prop_assert_eq!(s.completion_time.is_some(), s.completed == s.desired);
    }
}
