//! `kubectl inplace <TAB>`: kubectl (1.26 and later) completes a plugin's arguments by
//! running `kubectl_complete-inplace` from the PATH with the words typed after `inplace`,
//! the last one being the word under completion (empty after a space), and reads Cobra's
//! completion protocol back: one candidate per line, then `:<directive>`. The
//! `kubectl_complete-inplace` shipped beside the plugin runs `kubectl-inplace __complete
//! "$@"`, which [`super::run`] answers here, from the command line's own definition:
//! subcommands, long flags, and the values of enumerated arguments and options; where a
//! CloneSet is expected, also the names of the CloneSets the API server lists then
//! ([`cloneset_request`] says where and which namespace; `run` asks the server).

use clap::{Arg, Command};

/// The first argument that asks for completions instead of running a command (Cobra's name
/// for it, which kubectl's plugin completion scripts call).
pub const COMPLETE_ARG: &str = "__complete";

/// Cobra's `ShellCompDirectiveNoFileComp`: offer no file names when nothing matches.
const NO_FILE_COMP: u32 = 4;

/// The completion answer for `words` (the words after `inplace`, the last one partial), in
/// Cobra's protocol: the candidates, one a line, then the directive.
pub fn answer(cmd: &Command, words: &[String]) -> String {
    answer_with(cmd, words, &[])
}

/// [`answer`], with `clonesets` (names read from the API server, see [`cloneset_request`])
/// offered too where they start with the word under completion.
pub fn answer_with(cmd: &Command, words: &[String], clonesets: &[String]) -> String {
    let partial = words.last().map(String::as_str).unwrap_or("");
    let mut all = candidates(cmd, words);
    all.extend(clonesets.iter().filter(|n| n.starts_with(partial)).cloned());
    all.sort();
    all.dedup();
    let mut out = String::new();
    for candidate in all {
        out.push_str(&candidate);
        out.push('\n');
    }
    out.push_str(&format!(":{NO_FILE_COMP}\n"));
    out
}

/// Where the CloneSets whose names complete the last of `words` live: `Some` when that word
/// stands where a command takes a CloneSet (an argument named CLONESET, unless `-l` or `-A`
/// chose them already), with the `--kubeconfig`, `--context` and `-n` typed before it.
pub fn cloneset_request(root: &Command, words: &[String]) -> Option<super::online::ConnectArgs> {
    let (partial, typed) = words.split_last()?;
    if partial.starts_with('-') {
        return None;
    }
    let mut connect = super::online::ConnectArgs::default();
    let mut pending: Option<String> = None;
    let mut selector = false;
    for word in typed {
        if let Some(option) = pending.take() {
            set_connect(&mut connect, &option, word);
            continue;
        }
        let flag = word
            .strip_prefix("--")
            .or_else(|| word.strip_prefix('-').filter(|s| s.chars().count() == 1));
        if let Some(flag) = flag {
            let (name, value) = match flag.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (flag, None),
            };
            if matches!(name, "l" | "selector" | "A" | "all-namespaces") {
                selector = true;
            }
            match value {
                Some(v) => set_connect(&mut connect, name, v),
                None if matches!(name, "n" | "namespace" | "kubeconfig" | "context") => {
                    pending = Some(name.to_owned());
                }
                None => {}
            }
        }
    }
    let wanted = position(root, words)
        .and_then(|(cmd, n)| cmd.get_arguments().filter(|a| a.is_positional()).nth(n))
        .is_some_and(|arg| {
            arg.get_value_names()
                .is_some_and(|v| v.iter().any(|n| n.as_str().starts_with("CLONESET")))
                || arg.get_id() == "cloneset"
        });
    (wanted && !selector).then_some(connect)
}

fn set_connect(connect: &mut super::online::ConnectArgs, option: &str, value: &str) {
    match option {
        "n" | "namespace" => connect.namespace = Some(value.to_owned()),
        "kubeconfig" => connect.kubeconfig = Some(value.into()),
        "context" => connect.context = Some(value.to_owned()),
        _ => {}
    }
}

/// The command the last of `words` is typed in and how many positional words precede it
/// there; `None` while it is an option's value.
fn position<'c>(root: &'c Command, words: &[String]) -> Option<(&'c Command, usize)> {
    let typed = words.split_last().map(|(_, rest)| rest).unwrap_or(&[]);
    let walked = walk(root, typed);
    let cmd = walked.path.last().copied().unwrap_or(root);
    walked
        .expecting
        .is_none()
        .then_some((cmd, walked.positionals))
}

/// Where the words typed so far lead: the subcommands entered, the option whose value
/// comes next (if any), and the positional words in the last subcommand.
struct Walked<'c> {
    path: Vec<&'c Command>,
    expecting: Option<&'c Arg>,
    positionals: usize,
}

fn walk<'c>(root: &'c Command, typed: &[String]) -> Walked<'c> {
    let mut path = vec![root];
    let mut expecting: Option<&Arg> = None;
    let mut positionals = 0usize;
    for word in typed {
        let cmd = path.last().copied().unwrap_or(root);
        if expecting.take().is_some() {
            continue;
        }
        if let Some(long) = word.strip_prefix("--") {
            if !long.contains('=') {
                expecting =
                    find_option(&path, |a| a.get_long() == Some(long)).filter(|a| takes_value(a));
            }
            continue;
        }
        if let Some(short) = word.strip_prefix('-').filter(|s| s.chars().count() == 1) {
            expecting = find_option(&path, |a| {
                a.get_short().map(String::from).as_deref() == Some(short)
            })
            .filter(|a| takes_value(a));
            continue;
        }
        match cmd.find_subcommand(word) {
            Some(sub) => {
                path.push(sub);
                positionals = 0;
            }
            None => positionals += 1,
        }
    }
    Walked {
        path,
        expecting,
        positionals,
    }
}

/// What may stand in place of the last of `words`, starting with it: the values of the
/// option before it when it takes one, else long flags when it starts with `-`, else the
/// subcommands of the command reached and the values of its first enumerated positional.
pub fn candidates(root: &Command, words: &[String]) -> Vec<String> {
    let (partial, typed) = match words.split_last() {
        Some((last, rest)) => (last.as_str(), rest),
        None => ("", &[][..]),
    };
    let Walked {
        path,
        expecting,
        positionals,
    } = walk(root, typed);
    let cmd = path.last().copied().unwrap_or(root);
    let mut out: Vec<String> = match expecting {
        Some(option) => values(option),
        None if partial.starts_with('-') => path
            .iter()
            .enumerate()
            .flat_map(|(depth, c)| {
                let own = depth + 1 == path.len();
                c.get_arguments().filter(move |a| own || a.is_global_set())
            })
            .filter(|a| !a.is_hide_set())
            .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
            .collect(),
        None => {
            let subcommands = cmd
                .get_subcommands()
                .filter(|s| !s.is_hide_set() && s.get_name() != "help")
                .map(|s| s.get_name().to_owned());
            let positional = cmd
                .get_arguments()
                .filter(|a| a.is_positional())
                .nth(positionals)
                .map(values)
                .unwrap_or_default();
            subcommands.chain(positional).collect()
        }
    };
    out.retain(|c| c.starts_with(partial));
    out.sort();
    out.dedup();
    out
}

/// The option named by `is` among the arguments of the commands on `path`: the last
/// command's own, or a global one of a command before it.
fn find_option<'c>(path: &[&'c Command], is: impl Fn(&Arg) -> bool) -> Option<&'c Arg> {
    let last = path.len().saturating_sub(1);
    path.iter().enumerate().rev().find_map(|(depth, c)| {
        c.get_arguments()
            .filter(|a| !a.is_positional())
            .filter(|a| depth == last || a.is_global_set())
            .find(|a| is(a))
    })
}

fn takes_value(arg: &Arg) -> bool {
    arg.get_action().takes_values()
}

/// The values an argument is limited to (a `ValueEnum`), none for a free one.
fn values(arg: &Arg) -> Vec<String> {
    arg.get_possible_values()
        .into_iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| v.get_name().to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;
    use crate::cli::Cli;

    fn complete(words: &[&str]) -> Vec<String> {
        let words: Vec<String> = words.iter().map(|w| (*w).to_owned()).collect();
        candidates(&Cli::command(), &words)
    }

    #[test]
    fn subcommands_flags_and_values_by_position() {
        let top = complete(&[""]);
        for sub in [
            "plan",
            "rollout",
            "warm-up",
            "set",
            "scale-down",
            "get",
            "completion",
        ] {
            assert!(top.iter().any(|c| c == sub), "{sub} in {top:?}");
        }
        assert!(!top.iter().any(|c| c == "help"), "{top:?}");
        assert_eq!(complete(&["ro"]), ["rollout"]);
        assert_eq!(complete(&["completion", ""]), ["bash", "zsh"]);
        assert_eq!(complete(&["completion", "z"]), ["zsh"]);
        // An option's value is skipped, global options included.
        assert_eq!(complete(&["--namespace", "ns", "ro"]), ["rollout"]);
        assert_eq!(complete(&["-n", "ns", "completion", "b"]), ["bash"]);
        // Long flags: the command's own and the global ones.
        let flags = complete(&["get", "--"]);
        assert!(flags.iter().any(|f| f == "--namespace"), "{flags:?}");
        assert!(flags.iter().all(|f| f.starts_with("--")), "{flags:?}");
        assert_eq!(complete(&["--kube"]), ["--kubeconfig"]);
        // Nothing matches: nothing offered.
        assert!(complete(&["nothing-like-it"]).is_empty());
    }

    #[test]
    fn rollout_lists_its_subcommands() {
        let rollout = complete(&["rollout", ""]);
        assert!(rollout.iter().any(|c| c == "status"), "{rollout:?}");
        assert!(!rollout.iter().any(|c| c == "plan"), "{rollout:?}");
    }

    fn request(words: &[&str]) -> Option<crate::cli::online::ConnectArgs> {
        let words: Vec<String> = words.iter().map(|w| (*w).to_owned()).collect();
        cloneset_request(&Cli::command(), &words)
    }

    #[test]
    fn clonesets_are_asked_for_where_a_command_takes_one() {
        for words in [
            &["rollout", "status", ""][..],
            &["rollout", "undo", "we"][..],
            &["get", ""][..],
            &["plan", ""][..],
            &["set", "image", ""][..],
            &["scale-down", "w"][..],
            &["rollout", "pause", "--output", "json", ""][..],
        ] {
            assert!(request(words).is_some(), "{words:?}");
        }
        for words in [
            &[""][..],
            &["rollout", ""][..],
            &["rollout", "status", "web", ""][..],
            &["rollout", "status", "--timeout", ""][..],
            &["rollout", "status", "-"][..],
            &["rollout", "status", "-l", "app=web", ""][..],
            &["get", "-A", ""][..],
            &["set", "image", "web", ""][..],
            &["warm-up", ""][..],
            &["completion", ""][..],
        ] {
            assert!(request(words).is_none(), "{words:?}");
        }
        let Some(c) = request(&[
            "-n",
            "dev",
            "--kubeconfig=/k",
            "rollout",
            "--context",
            "c1",
            "status",
            "",
        ]) else {
            panic!("no request after -n, --kubeconfig=, --context");
        };
        assert_eq!(c.namespace.as_deref(), Some("dev"));
        assert_eq!(c.kubeconfig.as_deref(), Some(std::path::Path::new("/k")));
        assert_eq!(c.context.as_deref(), Some("c1"));
    }

    #[test]
    fn names_join_the_candidates_that_start_with_the_word() {
        let words = vec!["get".to_owned(), "w".to_owned()];
        let names = ["web".to_owned(), "api".to_owned(), "worker".to_owned()];
        assert_eq!(
            answer_with(&Cli::command(), &words, &names),
            "web\nworker\n:4\n"
        );
    }

    #[test]
    fn the_answer_ends_with_cobras_no_file_directive() {
        let words = vec!["completion".to_owned(), "b".to_owned()];
        assert_eq!(answer(&Cli::command(), &words), "bash\n:4\n");
        assert_eq!(answer(&Cli::command(), &["zz".to_owned()]), ":4\n");
    }
}
