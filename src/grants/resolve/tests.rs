//! Unit tests of [`super::resolve`]: one test per rule, hand-built inputs.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;

use super::*;
use crate::core::{Access, Catalog, CatalogTool};
use crate::grants::document::permits;
use crate::grants::input::{RuleInput, TenantDefault};
use crate::grants::resources_prompts::PatternBound;

use Access::{Destructive, Read, Write};

fn tool(name: &str, access: Access) -> CatalogTool {
    CatalogTool {
        name: name.into(),
        title: None,
        description: None,
        access,
        idempotent: access == Read,
        annotations: None,
        schema_bytes: 100,
        definition_digest: format!("sha256:{name}"),
        parts: Default::default(),
        awaiting_approval: None,
        served_access: None,
    }
}

fn catalog(tools: &[(&str, Access)]) -> Catalog {
    let tools: Vec<CatalogTool> = tools.iter().map(|(n, a)| tool(n, *a)).collect();
    Catalog {
        tool_count: tools.len() as u32,
        digest: "sha256:cat".into(),
        pages_read: 1,
        overrides_digest: None,
        tools,
        ..Catalog::default()
    }
}

/// A GitHub-like server: reads, writes, destructive tools.
fn github() -> Catalog {
    catalog(&[
        ("get_issue", Read),
        ("list_issues", Read),
        ("create_issue", Write),
        ("update_issue", Write),
        ("delete_repo", Destructive),
    ])
}

fn mcp_server(catalog: &Catalog) -> McpServerInput<'_> {
    McpServerInput {
        ready: true,
        not_ready_reason: None,
        optional: false,
        catalog: Some(catalog),
        allow: vec![],
        deny: vec![],
        require_approval: vec![],
        pinned: false,
    }
}

fn entry<'a>(name: &str, catalog: &'a Catalog) -> AgentServerInput<'a> {
    AgentServerInput {
        name: name.into(),
        prefix: None,
        allow: vec![],
        deny: vec![],
        require_approval: vec![],
        resources: Default::default(),
        prompts: Default::default(),
        server: Some(mcp_server(catalog)),
    }
}

fn input(servers: Vec<AgentServerInput<'_>>) -> ResolveInput<'_> {
    ResolveInput {
        servers,
        approval: Approval::None,
        policies: vec![],
        tenant_default: TenantDefault::Allow,
        preload_budget: u64::MAX,
    }
}

fn rule(servers: &[&str]) -> RuleInput {
    RuleInput {
        servers: servers.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn policy(name: &str, rules: Vec<RuleInput>) -> PolicyInput {
    PolicyInput {
        name: name.into(),
        rules,
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// The granted tool names of one server.
fn granted(res: &Resolution, server: &str) -> Vec<String> {
    let doc = &res.document;
    let s = doc.servers.iter().find(|s| s.name == server).unwrap();
    let mut names: Vec<String> = s.tools.iter().map(|t| t.name.clone()).collect();
    names.sort();
    names
}

fn outcome<'r>(res: &'r Resolution, server: &str) -> &'r ServerOutcome {
    res.servers.iter().find(|s| s.name == server).unwrap()
}

fn with_reason(res: &Resolution, reason: Reason) -> Vec<&Finding> {
    res.findings.iter().filter(|f| f.reason == reason).collect()
}

#[test]
fn everything_passes_when_no_plane_narrows() {
    let gh = github();
    let res = resolve(&input(vec![entry("github", &gh)]));
    assert!(res.ready && res.resolved());
    assert!(res.findings.is_empty(), "{:?}", res.findings);
    assert_eq!(granted(&res, "github").len(), 5);
    let o = outcome(&res, "github");
    assert!(o.available && !o.deferred);
    assert_eq!(o.granted_tools, 5);
    assert_eq!(o.granted_schema_bytes, 500);
}

#[test]
fn the_servers_own_allow_and_deny_narrow_first_and_deny_wins() {
    let gh = github();
    let mut e = entry("github", &gh);
    let s = e.server.as_mut().unwrap();
    s.allow = strings(&["*_issue*", "delete_repo"]);
    s.deny = strings(&["delete_*", "update_issue"]);
    let res = resolve(&input(vec![e]));
    assert_eq!(
        granted(&res, "github"),
        ["create_issue", "get_issue", "list_issues"]
    );
    assert_eq!(outcome(&res, "github").withheld_by_server, 2);
}

#[test]
fn the_specs_allow_and_deny_narrow_and_empty_allow_means_all() {
    let gh = github();
    let mut e = entry("github", &gh);
    e.deny = strings(&["delete_repo"]);
    let res = resolve(&input(vec![e.clone()]));
    assert_eq!(granted(&res, "github").len(), 4);

    e.allow = strings(&["get_?ssue", "list_*"]);
    e.deny = strings(&["list_*"]);
    let res = resolve(&input(vec![e]));
    assert_eq!(granted(&res, "github"), ["get_issue"]);
    let o = outcome(&res, "github");
    assert_eq!(
        (
            o.withheld_by_server,
            o.withheld_by_policy,
            o.withheld_by_spec
        ),
        (0, 0, 4)
    );
}

#[test]
fn qualified_names_use_the_prefix_defaulting_to_the_server_name() {
    let gh = github();
    let mut e = entry("github", &gh);
    e.allow = strings(&["get_issue"]);
    let mut other = entry("github-enterprise", &gh);
    other.prefix = Some("ghe".into());
    other.allow = strings(&["get_issue"]);
    let res = resolve(&input(vec![other, e]));
    let doc = res.document;
    let names: Vec<&str> = doc
        .servers
        .iter()
        .flat_map(|s| s.tools.iter().map(|t| t.qualified_name.as_str()))
        .collect();
    assert_eq!(names, ["github__get_issue", "ghe__get_issue"]);
    assert_eq!(doc.servers[0].name, "github", "servers sorted by name");
    assert_eq!(doc.servers[1].prefix, "ghe");
    let tool = permits(&doc, "ghe__get_issue").unwrap();
    assert_eq!((tool.name.as_str(), tool.access), ("get_issue", Read));
    assert_eq!(tool.definition_digest, "sha256:get_issue");
    assert!(tool.idempotent);
    assert!(permits(&doc, "github__delete_repo").is_none());
}

#[test]
fn max_access_is_a_ceiling() {
    let gh = github();
    for (ceiling, expected) in [
        (Some(Read), 2usize),
        (Some(Write), 4),
        (Some(Destructive), 5),
        (None, 5),
    ] {
        let mut i = input(vec![entry("github", &gh)]);
        let mut r = rule(&["github"]);
        r.max_access = ceiling;
        i.policies = vec![policy("p", vec![r])];
        let res = resolve(&i);
        assert_eq!(granted(&res, "github").len(), expected, "{ceiling:?}");
        assert_eq!(
            outcome(&res, "github").withheld_by_policy as usize,
            5 - expected
        );
    }
}

#[test]
fn approval_levels_follow_access() {
    let gh = github();
    for (level, expected) in [
        (Approval::None, vec![]),
        (Approval::Destructive, vec!["delete_repo"]),
        (
            Approval::Writes,
            vec!["create_issue", "delete_repo", "update_issue"],
        ),
        (
            Approval::All,
            vec![
                "create_issue",
                "delete_repo",
                "get_issue",
                "list_issues",
                "update_issue",
            ],
        ),
    ] {
        let mut i = input(vec![entry("github", &gh)]);
        i.approval = level;
        assert_eq!(approval_required(&resolve(&i)), expected, "{level:?}");
    }
}

fn approval_required(res: &Resolution) -> Vec<String> {
    let mut names: Vec<String> = res
        .document
        .servers
        .iter()
        .flat_map(|s| s.tools.iter())
        .filter(|t| t.requires_approval)
        .map(|t| t.name.clone())
        .collect();
    names.sort();
    names
}

#[test]
fn approval_is_also_required_by_name_and_by_policy() {
    let gh = github();
    let mut e = entry("github", &gh);
    e.server.as_mut().unwrap().require_approval = strings(&["get_issue"]);
    e.require_approval = strings(&["list_issues"]);
    let res = resolve(&input(vec![e.clone()]));
    assert_eq!(approval_required(&res), ["get_issue", "list_issues"]);

    // A rule's requireApprovalFor covers every tool of the servers it picks, whichever other
    // rules pick them too.
    let mut i = input(vec![e]);
    let mut bound = rule(&["github"]);
    bound.require_approval_for = Some(Write);
    i.policies = vec![policy("p", vec![rule(&["github"]), bound])];
    let res = resolve(&i);
    assert_eq!(
        approval_required(&res),
        [
            "create_issue",
            "delete_repo",
            "get_issue",
            "list_issues",
            "update_issue"
        ]
    );
}

#[test]
fn colliding_qualified_names_fail_the_resolution_naming_both() {
    let one = catalog(&[("b__c", Read), ("x", Read)]);
    let two = catalog(&[("c", Read)]);
    let mut a = entry("srv-a", &one);
    a.prefix = Some("a".into());
    let mut ab = entry("srv-ab", &two);
    ab.prefix = Some("a__b".into());
    let res = resolve(&input(vec![a, ab]));
    assert!(!res.resolved() && !res.ready);
    assert_eq!(res.collisions.len(), 1);
    let c = &res.collisions[0];
    assert_eq!(c.qualified_name, "a__b__c");
    assert_eq!(
        c.tools,
        [
            ToolRef {
                server: "srv-a".into(),
                tool: "b__c".into()
            },
            ToolRef {
                server: "srv-ab".into(),
                tool: "c".into()
            }
        ]
    );
    let f = with_reason(&res, Reason::NameCollision);
    assert_eq!(f.len(), 1);
    assert!(f[0].blocking);
    for part in ["b__c", "srv-a", "srv-ab", "a__b__c"] {
        assert!(f[0].message.contains(part), "{}", f[0].message);
    }
    // Neither colliding tool is published; the rest is, and the counts say so.
    let names: Vec<&str> = res
        .document
        .servers
        .iter()
        .flat_map(|s| s.tools.iter().map(|t| t.qualified_name.as_str()))
        .collect();
    assert_eq!(names, ["a__x"]);
    assert_eq!(outcome(&res, "srv-a").granted_tools, 1);
    assert_eq!(outcome(&res, "srv-a").withheld_by_spec, 1);
    assert_eq!(outcome(&res, "srv-ab").granted_tools, 0);
    assert_eq!(outcome(&res, "srv-ab").withheld_by_spec, 1);
}

#[test]
fn a_collision_is_only_between_granted_tools() {
    let one = catalog(&[("_b", Read)]);
    let two = catalog(&[("b", Read)]);
    let mut a = entry("x", &one);
    a.prefix = Some("a".into());
    let mut b = entry("y", &two);
    b.prefix = Some("a_".into());
    let res = resolve(&input(vec![a.clone(), b.clone()]));
    assert_eq!(res.collisions[0].qualified_name, "a___b");
    b.deny = strings(&["b"]);
    let res = resolve(&input(vec![a, b]));
    assert!(res.resolved() && res.ready);
}

#[test]
fn grant_patterns_matching_nothing_are_reported() {
    let gh = github();
    let mut e = entry("github", &gh);
    e.server.as_mut().unwrap().deny = strings(&["delete_*"]);
    e.allow = strings(&["get_*", "gett_*", "delete_repo", "gett_*"]);
    e.deny = strings(&["nothing-to-deny"]);
    let res = resolve(&input(vec![e]));
    assert!(res.ready, "a finding, not a failure");
    let f = with_reason(&res, Reason::PatternMatchesNothing);
    assert_eq!(f.len(), 2, "{f:?}");
    assert!(f.iter().all(|f| !f.blocking));
    assert!(f.iter().any(|f| f.message.contains("gett_*")
        && f.message.contains("matches no tool of McpServer github")));
    assert!(
        f.iter()
            .any(|f| f.message.contains("delete_repo") && f.message.contains("hides"))
    );
}

#[test]
fn require_approval_names_the_server_does_not_offer_are_reported() {
    let gh = github();
    let mut e = entry("github", &gh);
    e.server.as_mut().unwrap().deny = strings(&["delete_repo"]);
    e.require_approval = strings(&["delete_repo", "get_isue", "get_issue"]);
    let res = resolve(&input(vec![e]));
    let f = with_reason(&res, Reason::RequireApprovalNotOffered);
    assert_eq!(f.len(), 2);
    assert!(f[0].message.contains("delete_repo"));
    assert!(f[1].message.contains("get_isue"));
    assert!(res.ready);
}

#[test]
fn tenant_default_applies_only_when_no_policy_selects_the_tenant() {
    let gh = github();
    let mut i = input(vec![entry("github", &gh)]);
    i.tenant_default = TenantDefault::Allow;
    assert_eq!(granted(&resolve(&i), "github").len(), 5);

    i.tenant_default = TenantDefault::Deny;
    let res = resolve(&i);
    assert!(granted(&res, "github").is_empty());
    assert_eq!(outcome(&res, "github").withheld_by_policy, 5);
    let f = with_reason(&res, Reason::DeniedByPolicy);
    assert_eq!(f.len(), 1);
    assert!(f[0].message.contains("tenant default is deny"));

    // A policy replaces the default, whichever it is.
    i.policies = vec![policy("p", vec![rule(&["github"])])];
    assert_eq!(granted(&resolve(&i), "github").len(), 5);
    i.tenant_default = TenantDefault::Allow;
    let mut r = rule(&["github"]);
    r.max_access = Some(Read);
    i.policies = vec![policy("p", vec![r])];
    assert_eq!(granted(&resolve(&i), "github").len(), 2);
}

#[test]
fn every_selecting_policy_must_permit() {
    let gh = github();
    let mut i = input(vec![entry("github", &gh)]);
    let mut reads = rule(&["github"]);
    reads.max_access = Some(Read);
    let mut no_list = rule(&["github"]);
    no_list.deny = strings(&["list_*"]);
    i.policies = vec![
        policy("reads", vec![reads]),
        policy("no-list", vec![no_list]),
    ];
    let res = resolve(&i);
    assert_eq!(granted(&res, "github"), ["get_issue"]);
    assert_eq!(outcome(&res, "github").withheld_by_policy, 4);
}

#[test]
fn a_policy_with_no_rule_for_the_server_permits_none_of_its_tools() {
    let gh = github();
    let other = catalog(&[("ping", Read)]);
    let mut i = input(vec![entry("github", &gh), entry("other", &other)]);
    i.policies = vec![policy("only-other", vec![rule(&["other"])])];
    let res = resolve(&i);
    assert!(granted(&res, "github").is_empty());
    assert_eq!(granted(&res, "other"), ["ping"]);
    let f = with_reason(&res, Reason::DeniedByPolicy);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].server.as_deref(), Some("github"));
    assert!(f[0].message.contains("only-other has no rule"));

    // An empty rule list permits nothing.
    i.policies = vec![policy("empty", vec![])];
    let res = resolve(&i);
    assert_eq!(res.document.tool_count(), 0);
}

#[test]
fn within_a_policy_every_rule_that_picks_a_server_bounds_it() {
    let gh = github();
    let mut i = input(vec![entry("github", &gh)]);
    let mut reads = rule(&["github"]);
    reads.max_access = Some(Read);
    let mut create = rule(&["github", "elsewhere"]);
    create.allow = strings(&["create_*", "get_*"]);
    create.max_access = Some(Write);
    // Rules do not add up: a tool must pass both, so only get_issue (a read that create_*,
    // get_* allows) is left.
    i.policies = vec![policy("p", vec![reads.clone(), create.clone()])];
    assert_eq!(granted(&resolve(&i), "github"), ["get_issue"]);

    // A third rule's deny takes a tool away from both.
    let mut no_get = rule(&["github"]);
    no_get.deny = strings(&["get_*"]);
    i.policies = vec![policy("p", vec![reads, create, no_get])];
    let res = resolve(&i);
    assert!(granted(&res, "github").is_empty());
    assert_eq!(outcome(&res, "github").withheld_by_policy, 5);
}

#[test]
fn the_tightest_ceiling_and_the_lowest_approval_level_apply() {
    let gh = github();
    let mut i = input(vec![entry("github", &gh)]);
    let mut writes = rule(&["github"]);
    writes.max_access = Some(Write);
    writes.require_approval_for = Some(Destructive);
    let mut reads = rule(&["github"]);
    reads.max_access = Some(Read);
    i.policies = vec![policy("p", vec![writes.clone(), reads])];
    assert_eq!(
        granted(&resolve(&i), "github"),
        ["get_issue", "list_issues"]
    );

    let mut all_approved = rule(&["github"]);
    all_approved.require_approval_for = Some(Read);
    i.policies = vec![policy("p", vec![writes, all_approved])];
    let res = resolve(&i);
    assert_eq!(granted(&res, "github").len(), 4);
    assert_eq!(
        approval_required(&res).len(),
        4,
        "read is the lowest level: every call"
    );
}

#[test]
fn a_label_that_makes_a_second_rule_pick_a_server_only_narrows_it() {
    // Issue 19: rules {names: [files], maxAccess: read} and {selector: {tier: admin}, deny:
    // [delete_*]}; the tenant labels files tier=admin, so the second rule picks it too.
    let files = catalog(&[
        ("read_file", Read),
        ("write_file", Write),
        ("delete_file", Destructive),
        ("wipe", Destructive),
    ]);
    let mut i = input(vec![entry("files", &files)]);
    let mut by_name = rule(&["files"]);
    by_name.max_access = Some(Read);
    let mut admin = rule(&[]);
    admin.deny = strings(&["delete_*"]);
    i.policies = vec![policy("tenants", vec![by_name.clone(), admin.clone()])];
    let unlabelled = resolve(&i);
    assert_eq!(granted(&unlabelled, "files"), ["read_file"]);

    admin.servers.insert("files".into());
    i.policies = vec![policy("tenants", vec![by_name, admin])];
    let labelled = resolve(&i);
    assert_eq!(
        granted(&labelled, "files"),
        ["read_file"],
        "still read-only"
    );
}

#[test]
fn a_rule_that_only_bounds_a_server_never_lets_it_in() {
    let gh = github();
    let other = catalog(&[("ping", Read), ("reset", Destructive)]);
    let mut i = input(vec![entry("github", &gh), entry("other", &other)]);
    // An unreadable selector: the rule's bounds hold for every server it might pick.
    let mut unreadable = rule(&[]);
    unreadable.bounds_only = ["github", "other"].iter().map(|s| s.to_string()).collect();
    unreadable.max_access = Some(Read);
    i.policies = vec![policy("p", vec![rule(&["github"]), unreadable])];
    let res = resolve(&i);
    assert_eq!(granted(&res, "github"), ["get_issue", "list_issues"]);
    assert!(granted(&res, "other").is_empty(), "no rule picks other");
    let f = with_reason(&res, Reason::DeniedByPolicy);
    assert_eq!(f.len(), 1);
    assert_eq!(
        f[0].message,
        "no tool of McpServer other is granted: McpTenantPolicy p has no rule that picks it"
    );
}

/// A tool the server serves as `served` that the McpServer's tools.overrides set to `access`.
fn overridden(name: &str, served: Access, access: Access) -> CatalogTool {
    CatalogTool {
        served_access: Some(served),
        ..tool(name, access)
    }
}

/// Issue 19's server: wipe and write_file, both overridden to read by the tenant.
fn capped() -> Catalog {
    let mut c = catalog(&[("read_file", Read)]);
    c.tools.push(overridden("wipe", Destructive, Read));
    c.tools.push(overridden("write_file", Write, Read));
    c.tools.sort_by(|a, b| a.name.cmp(&b.name));
    c.tool_count = 3;
    c
}

#[test]
fn under_a_policy_a_tenant_override_cannot_lower_the_ceiling_it_is_judged_by() {
    let cap = capped();
    let mut e = entry("capped", &cap);
    e.allow = strings(&["wipe", "write_file", "read_file"]);
    let mut i = input(vec![e]);
    let mut r = rule(&["capped"]);
    r.max_access = Some(Read);
    i.policies = vec![policy("p", vec![r])];
    let res = resolve(&i);
    assert_eq!(granted(&res, "capped"), ["read_file"]);
    let denied = with_reason(&res, Reason::DeniedByPolicy);
    assert_eq!(
        denied[0].message,
        "tool wipe of McpServer capped is asked for by name, but McpTenantPolicy p does not \
         permit it: its rules[0] caps access at read and wipe counts as destructive"
    );
    let ignored = with_reason(&res, Reason::OverrideNotApplied);
    assert_eq!(ignored.len(), 2, "{ignored:?}");
    assert_eq!(
        ignored[0].message,
        "McpServer capped's tools.overrides classify wipe as read, but a McpTenantPolicy bounds \
         this server, and there an McpServer's override can only raise a classification: wipe \
         counts as destructive, as the server classifies it; a platform engineer can \
         reclassify it in the rules[].overrides of every policy rule that picks the server"
    );
    assert!(!ignored[0].blocking && res.ready);
}

#[test]
fn under_a_policy_a_tenant_override_cannot_dodge_an_approval() {
    let cap = capped();
    let mut i = input(vec![entry("capped", &cap)]);
    let mut r = rule(&["capped"]);
    r.require_approval_for = Some(Write);
    i.policies = vec![policy("p", vec![r])];
    let res = resolve(&i);
    assert_eq!(approval_required(&res), ["wipe", "write_file"]);
    let doc = res.document;
    let published = |name: &str| {
        doc.servers[0]
            .tools
            .iter()
            .find(|t| t.name == name)
            .unwrap()
    };
    assert_eq!(
        published("wipe").access,
        Destructive,
        "grants.json shows the access that applies"
    );
    assert_eq!(published("write_file").access, Write);

    // The AgentSpec's own approval level judges the same access.
    let mut r = rule(&["capped"]);
    r.allow = strings(&["*"]);
    i.policies = vec![policy("p", vec![r])];
    i.approval = Approval::Destructive;
    assert_eq!(approval_required(&resolve(&i)), ["wipe"]);
}

#[test]
fn an_override_that_tightens_works_with_and_without_a_policy() {
    let mut c = catalog(&[("list", Read)]);
    c.tools.push(overridden("purge", Read, Destructive));
    let mut i = input(vec![entry("s", &c)]);
    i.approval = Approval::Destructive;
    assert_eq!(approval_required(&resolve(&i)), ["purge"], "no policy");
    let mut r = rule(&["s"]);
    r.max_access = Some(Write);
    i.policies = vec![policy("p", vec![r])];
    let res = resolve(&i);
    assert_eq!(
        granted(&res, "s"),
        ["list"],
        "a policy: purge counts as destructive"
    );
    assert!(with_reason(&res, Reason::OverrideNotApplied).is_empty());
}

#[test]
fn without_a_policy_the_mcp_servers_overrides_apply_as_they_are() {
    let cap = capped();
    let mut i = input(vec![entry("capped", &cap)]);
    i.approval = Approval::Destructive;
    let res = resolve(&i);
    assert_eq!(granted(&res, "capped"), ["read_file", "wipe", "write_file"]);
    assert!(
        approval_required(&res).is_empty(),
        "the owner's classification: read"
    );
    assert!(with_reason(&res, Reason::OverrideNotApplied).is_empty());
}

#[test]
fn the_platform_reclassifies_and_the_strictest_reclassification_wins() {
    let cap = capped();
    let mut i = input(vec![entry("capped", &cap)]);
    let mut r = rule(&["capped"]);
    r.max_access = Some(Read);
    r.overrides = [("wipe".to_string(), Read)].into();
    i.policies = vec![policy("p", vec![r.clone()])];
    let res = resolve(&i);
    assert_eq!(granted(&res, "capped"), ["read_file", "wipe"]);
    assert_eq!(
        with_reason(&res, Reason::OverrideNotApplied).len(),
        1,
        "write_file only"
    );

    // Another policy's rule says write: the strictest applies, and write is over the cap.
    let mut other = rule(&["capped"]);
    other.overrides = [("wipe".to_string(), Write)].into();
    i.policies = vec![policy("p", vec![r.clone()]), policy("q", vec![other])];
    assert_eq!(granted(&resolve(&i), "capped"), ["read_file"]);

    // A rule picking the server that does not reclassify wipe counts it as served
    // (destructive): a label that makes it pick the server cannot lower anything.
    let mut labelled = rule(&["capped"]);
    labelled.position = 1;
    labelled.deny = strings(&["nothing"]);
    i.policies = vec![policy("p", vec![r.clone(), labelled])];
    let res = resolve(&i);
    assert_eq!(granted(&res, "capped"), ["read_file"]);
    let ignored = with_reason(&res, Reason::OverrideNotApplied);
    assert!(
        ignored[0]
            .message
            .contains("wipe counts as destructive, as the server classifies it"),
        "{}",
        ignored[0].message
    );

    // The tenant can still raise what the platform lowered.
    let mut raised = capped();
    raised.tools[1] = overridden("wipe", Destructive, Destructive);
    let mut i = input(vec![entry("capped", &raised)]);
    let mut no_cap = r.clone();
    no_cap.max_access = None;
    i.policies = vec![policy("p", vec![no_cap])];
    i.approval = Approval::Destructive;
    assert_eq!(approval_required(&resolve(&i)), ["wipe"]);
}

#[test]
fn a_tool_asked_for_by_name_but_denied_by_policy_is_reported() {
    let gh = github();
    let mut e = entry("github", &gh);
    e.allow = strings(&["delete_repo", "update_*", "get_issue"]);
    let mut i = input(vec![e]);
    let mut writes = rule(&["github"]);
    writes.max_access = Some(Write);
    let mut reads = rule(&["github"]);
    reads.max_access = Some(Read);
    i.policies = vec![policy("writes", vec![writes]), policy("reads", vec![reads])];
    let res = resolve(&i);
    assert_eq!(granted(&res, "github"), ["get_issue"]);
    let f = with_reason(&res, Reason::DeniedByPolicy);
    assert_eq!(
        f.len(),
        1,
        "update_* is a wildcard: counted, not named: {f:?}"
    );
    assert_eq!(
        f[0].message,
        "tool delete_repo of McpServer github is asked for by name, but McpTenantPolicies \
         reads, writes do not permit it (reads: its rules[0] caps access at read and \
         delete_repo counts as destructive; writes: its rules[0] caps access at write and \
         delete_repo counts as destructive)"
    );
    assert!(!f[0].blocking && res.ready);
}

#[test]
fn deferred_when_granted_schemas_exceed_the_budget() {
    let gh = github(); // 5 tools × 100 bytes
    let mut i = input(vec![entry("github", &gh)]);
    i.preload_budget = 500;
    let res = resolve(&i);
    assert!(!outcome(&res, "github").deferred);
    assert!(!res.document.servers[0].deferred);
    i.preload_budget = 499;
    let res = resolve(&i);
    assert!(outcome(&res, "github").deferred);
    assert!(res.document.servers[0].deferred);
    // Only granted tools count.
    i.servers[0].deny = strings(&["delete_repo"]);
    assert!(!outcome(&resolve(&i), "github").deferred);
}

#[test]
fn a_missing_server_is_reported_and_blocks_readiness() {
    let gh = github();
    let mut missing = entry("gone", &gh);
    missing.server = None;
    let res = resolve(&input(vec![missing, entry("github", &gh)]));
    assert!(!res.ready && res.resolved());
    assert_eq!(res.reasons(), [Reason::ServerNotFound]);
    let doc = &res.document;
    assert_eq!(doc.servers[0].name, "github");
    assert!(!doc.servers[1].available && doc.servers[1].tools.is_empty());
    assert_eq!(res.blocking().count(), 1);
}

#[test]
fn an_unready_server_blocks_readiness_unless_optional() {
    let gh = github();
    let mut e = entry("github", &gh);
    {
        let s = e.server.as_mut().unwrap();
        s.ready = false;
        s.not_ready_reason = Some("Unauthorized".into());
    }
    let res = resolve(&input(vec![e.clone()]));
    assert!(!res.ready);
    let f = with_reason(&res, Reason::ServerNotReady);
    assert!(f[0].blocking && f[0].message.contains("Unauthorized"));
    assert!(!outcome(&res, "github").available);
    assert_eq!(res.document.tool_count(), 0, "no stale grants");

    e.server.as_mut().unwrap().optional = true;
    let res = resolve(&input(vec![e.clone()]));
    assert!(res.ready);
    let doc = &res.document;
    assert!(doc.servers[0].optional && !doc.servers[0].available);
    assert_eq!(with_reason(&res, Reason::ServerNotReady).len(), 1);

    // Ready but no catalogue yet.
    let s = e.server.as_mut().unwrap();
    s.optional = false;
    s.ready = true;
    s.catalog = None;
    let res = resolve(&input(vec![e]));
    assert!(!res.ready);
    assert!(res.findings[0].message.contains("no tool catalogue yet"));
}

#[test]
fn withheld_counts_add_up_to_the_catalogue() {
    let gh = github();
    let mut e = entry("github", &gh);
    e.server.as_mut().unwrap().deny = strings(&["delete_repo"]);
    e.deny = strings(&["get_issue"]);
    let mut i = input(vec![e]);
    let mut r = rule(&["github"]);
    r.max_access = Some(Read);
    i.policies = vec![policy("p", vec![r])];
    let o = resolve(&i).servers[0].clone();
    assert_eq!(
        (
            o.granted_tools,
            o.withheld_by_server,
            o.withheld_by_policy,
            o.withheld_by_spec
        ),
        (1, 1, 2, 1)
    );
}

#[test]
fn findings_and_document_are_deterministic() {
    let gh = github();
    let other = catalog(&[("ping", Read)]);
    let mut a = entry("github", &gh);
    a.allow = strings(&["zzz", "aaa", "get_*"]);
    let b = entry("other", &other);
    let mut i = input(vec![a.clone(), b.clone()]);
    let res1 = resolve(&i);
    i.servers = vec![b, a];
    let res2 = resolve(&i);
    assert_eq!(res1, res2);
    let d = res1.document.digest();
    assert_eq!(d, res2.document.digest());
    let patterns: BTreeSet<&str> = res1
        .findings
        .iter()
        .map(|f| f.message.split(' ').nth(2).unwrap())
        .collect();
    assert_eq!(patterns, BTreeSet::from(["aaa", "zzz"]));
}

#[test]
fn reason_words_are_the_condition_reasons() {
    for (reason, word) in [
        (Reason::ServerNotFound, "ServerNotFound"),
        (Reason::ServerNotReady, "ServerNotReady"),
        (Reason::NameCollision, "NameCollision"),
        (Reason::PatternMatchesNothing, "PatternMatchesNothing"),
        (Reason::DeniedByPolicy, "DeniedByPolicy"),
        (
            Reason::RequireApprovalNotOffered,
            "RequireApprovalNotOffered",
        ),
        (Reason::OverrideNotApplied, "OverrideNotApplied"),
    ] {
        assert_eq!(reason.to_string(), word);
        assert_eq!(serde_json::to_value(reason).unwrap(), word);
    }
}

#[test]
fn a_tool_waiting_for_approval_is_granted_to_nobody_and_the_agent_hears_why() {
    use crate::core::pinning::{AwaitingApproval, Part};
    let mut gh = github();
    for t in gh.tools.iter_mut() {
        t.awaiting_approval = match t.name.as_str() {
            "get_issue" => Some(AwaitingApproval {
                pinned_digest: Some("sha256:old".into()),
                pinned_parts: Default::default(),
                changed: vec![Part::Description],
            }),
            "delete_repo" => Some(AwaitingApproval {
                pinned_digest: None,
                pinned_parts: Default::default(),
                changed: vec![],
            }),
            _ => None,
        };
    }
    let mut e = entry("github", &gh);
    e.deny = strings(&["delete_repo"]);
    let res = resolve(&input(vec![e]));
    assert_eq!(
        granted(&res, "github"),
        ["create_issue", "list_issues", "update_issue"]
    );
    let o = outcome(&res, "github");
    assert_eq!((o.awaiting_approval, o.withheld_by_spec), (1, 1));
    assert!(
        res.ready,
        "a waiting tool does not keep the agent from being ready"
    );
    let why = with_reason(&res, Reason::AwaitingApproval);
    assert_eq!(
        why.len(),
        1,
        "only the tool this agent would be granted is reported"
    );
    assert_eq!(why[0].server.as_deref(), Some("github"));
    assert!(
        why[0]
            .message
            .contains("tool get_issue of McpServer github")
            && why[0].message.contains("description changed"),
        "{}",
        why[0].message
    );
}

#[test]
fn a_denied_tool_hears_which_rule_refuses_it() {
    let gh = github();
    let mut e = entry("github", &gh);
    e.allow = strings(&["get_issue", "create_issue", "update_issue"]);
    let mut i = input(vec![e]);
    let open = rule(&["github"]);
    let mut only_reads = rule(&["github"]);
    only_reads.position = 1;
    only_reads.allow = strings(&["list_*", "get_*"]);
    let mut no_update = rule(&["github"]);
    no_update.position = 2;
    no_update.deny = strings(&["update_*"]);
    // Given in another order than the spec's: the message quotes the first in spec order.
    i.policies = vec![policy("p", vec![no_update, only_reads, open])];
    let res = resolve(&i);
    assert_eq!(granted(&res, "github"), ["get_issue"]);
    let messages: Vec<&str> = with_reason(&res, Reason::DeniedByPolicy)
        .iter()
        .map(|f| f.message.as_str())
        .collect();
    assert_eq!(
        messages,
        [
            "tool create_issue of McpServer github is asked for by name, but McpTenantPolicy p \
             does not permit it: its rules[1] allows only get_*, list_*",
            "tool update_issue of McpServer github is asked for by name, but McpTenantPolicy p \
             does not permit it: its rules[1] allows only get_*, list_*",
        ]
    );
}

// ─── resources and prompts ──────────────────────────────────────────────────────────────

fn bound(allow: &[&str], deny: &[&str]) -> PatternBound {
    PatternBound {
        allow: strings(allow),
        deny: strings(deny),
    }
}

/// The AgentSpec's own default is least privilege: an entry that names no resource or prompt
/// pattern gets none, whatever the tenant plane would permit.
#[test]
fn an_agentspec_entry_without_patterns_gets_no_resources_or_prompts() {
    let gh = github();
    let resolution = resolve(&input(vec![entry("gh", &gh)]));
    let server = &resolution.document.servers[0];
    assert!(server.resources.is_empty() && server.prompts.is_empty());
    assert_eq!(
        resolution.document.schema_version,
        crate::grants::SCHEMA_VERSION_V1
    );

    let mut wanting = entry("gh", &gh);
    wanting.resources = bound(&["repo://*"], &["repo://*/secrets"]);
    wanting.prompts = bound(&["triage"], &[]);
    let resolution = resolve(&input(vec![wanting]));
    let server = &resolution.document.servers[0];
    assert_eq!(
        server.resources,
        vec![bound(&["repo://*"], &["repo://*/secrets"])]
    );
    assert_eq!(server.prompts, vec![bound(&["triage"], &[])]);
    assert_eq!(
        resolution.document.schema_version,
        crate::grants::SCHEMA_VERSION
    );
}

/// Where a policy picks the server, none is granted unless the rule allows some; every picking
/// rule bounds (they do not add up).
#[test]
fn policy_rules_bound_resources_and_prompts_and_grant_none_by_default() {
    let gh = github();
    let mut wanting = entry("gh", &gh);
    wanting.resources = bound(&["*"], &[]);
    wanting.prompts = bound(&["*"], &[]);
    let with = |rules: Vec<RuleInput>| {
        let mut input = input(vec![wanting.clone()]);
        input.policies = vec![policy("platform", rules)];
        resolve(&input).document.servers[0].clone()
    };

    let silent = with(vec![rule(&["gh"])]);
    assert!(
        silent.resources.is_empty() && silent.prompts.is_empty(),
        "{silent:?}"
    );

    let mut docs = rule(&["gh"]);
    docs.resources = bound(&["repo://docs/*"], &[]);
    let server = with(vec![docs.clone()]);
    assert_eq!(
        server.resources,
        vec![bound(&["*"], &[]), bound(&["repo://docs/*"], &[])]
    );
    assert!(server.prompts.is_empty(), "the rule names no prompt");

    // A second picking rule without resource patterns bounds too: nothing.
    assert!(with(vec![docs.clone(), rule(&["gh"])]).resources.is_empty());
    // A rule picking another server does not bound this one.
    assert_eq!(
        with(vec![docs.clone(), rule(&["other"])]).resources.len(),
        2
    );
    // A rule that only might pick the server (selector unknown) bounds it.
    let mut unknown = rule(&[]);
    unknown.bounds_only = ["gh".to_string()].into();
    assert!(with(vec![docs.clone(), unknown]).resources.is_empty());
    // A policy with no rule for the server grants none.
    assert!(with(vec![rule(&["other"])]).resources.is_empty());
}

#[test]
fn tenant_default_deny_and_unavailable_servers_grant_no_resources() {
    let gh = github();
    let mut wanting = entry("gh", &gh);
    wanting.resources = bound(&["*"], &[]);
    let mut denied = input(vec![wanting.clone()]);
    denied.tenant_default = TenantDefault::Deny;
    assert!(resolve(&denied).document.servers[0].resources.is_empty());

    wanting.server.as_mut().unwrap().ready = false;
    assert!(
        resolve(&input(vec![wanting])).document.servers[0]
            .resources
            .is_empty()
    );
}

/// Under pinning the document carries the granted prompts' approved digests; a waiting prompt
/// and one the bounds do not grant are not among them. Unpinned, nothing of the kind.
#[test]
fn a_pinned_servers_granted_prompts_carry_their_approved_digests() {
    use crate::core::pinning::pin;
    use crate::core::resources_prompts::{ListRead, OfferedRead, record};
    let offering = |review: &str| {
        let mut c = github();
        let prompts = [
            json!({"name": "review", "description": review}),
            json!({"name": "triage"}),
            json!({"name": "exfiltrate"}),
        ];
        record(
            &mut c,
            &OfferedRead {
                prompts: ListRead::Read(
                    prompts
                        .iter()
                        .map(|p| p.as_object().unwrap().clone())
                        .collect(),
                ),
                ..OfferedRead::default()
            },
        );
        c
    };
    let first = pin(None, offering("Review."), &Default::default()).catalog;
    let changed = pin(
        Some(&first),
        offering("Review, then push."),
        &Default::default(),
    )
    .catalog;
    let digest = |c: &Catalog, name: &str| {
        c.prompts
            .iter()
            .find(|p| p.name == name)
            .unwrap()
            .definition_digest
            .clone()
    };
    let granted = |catalog: &Catalog, pinned: bool| {
        let mut wanting = entry("gh", catalog);
        wanting.prompts = bound(&["*"], &["exfiltrate"]);
        wanting.server.as_mut().unwrap().pinned = pinned;
        resolve(&input(vec![wanting])).document.servers[0].clone()
    };
    assert_eq!(
        granted(&changed, true).prompt_digests,
        Some(BTreeMap::from([(
            "triage".to_string(),
            digest(&changed, "triage")
        )]))
    );
    assert_eq!(
        granted(&first, true).prompt_digests.unwrap().get("review"),
        Some(&digest(&first, "review"))
    );
    assert_eq!(granted(&changed, false).prompt_digests, None);
    // A pinned server whose prompts are not granted carries nothing of them.
    let mut silent = entry("gh", &changed);
    silent.server.as_mut().unwrap().pinned = true;
    assert_eq!(
        resolve(&input(vec![silent])).document.servers[0].prompt_digests,
        None
    );
}
