//! Property tests of [`super::resolve`]: random small catalogues, patterns and policies over a
//! tiny alphabet (so patterns hit often), checked against the rules stated independently here.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::core::{Access, Catalog, CatalogTool};
use crate::grants::input::{RuleInput, TenantDefault};
use crate::grants::pattern::PatternSet;

const SERVER_NAMES: [&str; 3] = ["s0", "s1", "s2"];

/// An owned stand-in for one AgentSpec entry and its McpServer.
#[derive(Clone, Debug)]
struct ServerCase {
    name: String,
    prefix: Option<String>,
    allow: Vec<String>,
    deny: Vec<String>,
    require_approval: Vec<String>,
    exists: bool,
    ready: bool,
    optional: bool,
    catalog: Option<Catalog>,
    server_allow: Vec<String>,
    server_deny: Vec<String>,
    server_require_approval: Vec<String>,
}

#[derive(Clone, Debug)]
struct Case {
    servers: Vec<ServerCase>,
    policies: Vec<PolicyInput>,
    tenant_default: TenantDefault,
    approval: Approval,
    preload_budget: u64,
}

impl Case {
    fn input(&self) -> ResolveInput<'_> {
        ResolveInput {
            servers: self
                .servers
                .iter()
                .map(|s| AgentServerInput {
                    name: s.name.clone(),
                    prefix: s.prefix.clone(),
                    allow: s.allow.clone(),
                    deny: s.deny.clone(),
                    require_approval: s.require_approval.clone(),
                    resources: Default::default(),
                    prompts: Default::default(),
                    server: s.exists.then(|| McpServerInput {
                        ready: s.ready,
                        not_ready_reason: None,
                        optional: s.optional,
                        catalog: s.catalog.as_ref(),
                        allow: s.server_allow.clone(),
                        deny: s.server_deny.clone(),
                        require_approval: s.server_require_approval.clone(),
                        pinned: false,
                    }),
                })
                .collect(),
            approval: self.approval,
            policies: self.policies.clone(),
            tenant_default: self.tenant_default,
            preload_budget: self.preload_budget,
        }
    }

    /// The same case with every list in another order.
    fn permuted(&self, seed: u64) -> Case {
        let mut rng = seed | 1;
        let mut case = self.clone();
        shuffle(&mut case.servers, &mut rng);
        for s in &mut case.servers {
            for list in [
                &mut s.allow,
                &mut s.deny,
                &mut s.require_approval,
                &mut s.server_allow,
                &mut s.server_deny,
                &mut s.server_require_approval,
            ] {
                shuffle(list, &mut rng);
            }
            if let Some(c) = &mut s.catalog {
                shuffle(&mut c.tools, &mut rng);
            }
        }
        shuffle(&mut case.policies, &mut rng);
        for p in &mut case.policies {
            shuffle(&mut p.rules, &mut rng);
            for r in &mut p.rules {
                shuffle(&mut r.allow, &mut rng);
                shuffle(&mut r.deny, &mut rng);
            }
        }
        case
    }
}

fn shuffle<T>(items: &mut [T], rng: &mut u64) {
    for i in (1..items.len()).rev() {
        // xorshift64
        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;
        items.swap(i, (*rng % (i as u64 + 1)) as usize);
    }
}

fn access() -> impl Strategy<Value = Access> {
    prop_oneof![
        Just(Access::Read),
        Just(Access::Write),
        Just(Access::Destructive)
    ]
}

/// Deny lists: mostly empty, so that the other planes get a say.
fn denies() -> impl Strategy<Value = Vec<String>> {
    prop_oneof![
        3 => Just(Vec::new()),
        1 => prop::collection::vec(pattern(), 1..2),
    ]
}

/// One pattern: arbitrary over the alphabet, or a prefix or suffix glob (which match often).
fn pattern() -> impl Strategy<Value = String> {
    prop_oneof!["[ab_*?]{1,3}", "[ab_]{0,1}[*]", "[*][ab_]{0,1}"]
}

/// Pattern lists: often empty (empty allow = all), otherwise one or two short patterns.
fn patterns() -> impl Strategy<Value = Vec<String>> {
    prop_oneof![
        1 => Just(Vec::new()),
        1 => prop::collection::vec(pattern(), 1..3),
    ]
}

fn names() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec("[ab_]{1,2}", 0..2)
}

fn catalog() -> impl Strategy<Value = Catalog> {
    prop::collection::btree_map(
        "[ab_]{1,2}",
        (
            (access(), prop::option::weighted(0.3, access())),
            any::<bool>(),
            0u64..50,
            prop::bool::weighted(0.2),
        ),
        0..7,
    )
    .prop_map(|tools| {
        let tools: Vec<CatalogTool> = tools
            .into_iter()
            .map(
                |(name, ((served, overridden), idempotent, schema_bytes, waits))| CatalogTool {
                    definition_digest: format!("sha256:{name}"),
                    name,
                    title: None,
                    description: None,
                    access: overridden.unwrap_or(served),
                    served_access: overridden.map(|_| served),
                    idempotent,
                    annotations: None,
                    schema_bytes,
                    parts: Default::default(),
                    awaiting_approval: waits.then(|| crate::core::pinning::AwaitingApproval {
                        pinned_digest: None,
                        pinned_parts: Default::default(),
                        changed: Vec::new(),
                    }),
                },
            )
            .collect();
        Catalog {
            tool_count: tools.len() as u32,
            digest: String::new(),
            pages_read: 1,
            overrides_digest: None,
            tools,
            ..Catalog::default()
        }
    })
}

fn server_case(name: &'static str) -> impl Strategy<Value = ServerCase> {
    (
        prop::option::weighted(0.5, "[a_]{1,2}"),
        (patterns(), denies(), names()),
        (
            prop::bool::weighted(0.9),
            prop::bool::weighted(0.85),
            any::<bool>(),
        ),
        prop::option::weighted(0.9, catalog()),
        (patterns(), denies(), names()),
    )
        .prop_map(
            move |(
                prefix,
                (allow, deny, require_approval),
                (exists, ready, optional),
                catalog,
                (server_allow, server_deny, server_require_approval),
            )| ServerCase {
                name: name.to_string(),
                prefix,
                allow,
                deny,
                require_approval,
                exists,
                ready,
                optional,
                catalog,
                server_allow,
                server_deny,
                server_require_approval,
            },
        )
}

/// A platform's reclassification: mostly none, sometimes a tool or two.
fn platform_overrides() -> impl Strategy<Value = BTreeMap<String, Access>> {
    prop_oneof![
        3 => Just(BTreeMap::new()),
        1 => prop::collection::btree_map("[ab_]{1,2}", access(), 1..3),
    ]
}

/// A rule; its position is set by [`case`], once the policy's rules are known.
fn rule() -> impl Strategy<Value = RuleInput> {
    (
        prop::sample::subsequence(SERVER_NAMES.to_vec(), 1..=3),
        prop_oneof![
            4 => Just(Vec::new()),
            1 => prop::sample::subsequence(SERVER_NAMES.to_vec(), 1..=2),
        ],
        patterns(),
        denies(),
        prop::option::of(access()),
        prop::option::weighted(0.3, access()),
        platform_overrides(),
    )
        .prop_map(
            |(servers, bounds_only, allow, deny, max_access, require_approval_for, overrides)| {
                RuleInput {
                    position: 0,
                    servers: servers.into_iter().map(str::to_string).collect(),
                    bounds_only: bounds_only.into_iter().map(str::to_string).collect(),
                    allow,
                    deny,
                    max_access,
                    require_approval_for,
                    overrides,
                    ..Default::default()
                }
            },
        )
}

fn case() -> impl Strategy<Value = Case> {
    let servers = prop::sample::subsequence(SERVER_NAMES.to_vec(), 1..=3)
        .prop_flat_map(|names| names.into_iter().map(server_case).collect::<Vec<_>>());
    let policies =
        prop::collection::vec(prop::collection::vec(rule(), 0..4), 0..3).prop_map(|policies| {
            policies
                .into_iter()
                .enumerate()
                .map(|(i, rules)| PolicyInput {
                    name: format!("p{i}"),
                    rules: rules
                        .into_iter()
                        .enumerate()
                        .map(|(position, rule)| RuleInput { position, ..rule })
                        .collect(),
                })
                .collect::<Vec<_>>()
        });
    (
        servers,
        policies,
        prop_oneof![3 => Just(TenantDefault::Allow), 1 => Just(TenantDefault::Deny)],
        prop_oneof![
            Just(Approval::None),
            Just(Approval::Destructive),
            Just(Approval::Writes),
            Just(Approval::All)
        ],
        0u64..150,
    )
        .prop_map(
            |(servers, policies, tenant_default, approval, preload_budget)| Case {
                servers,
                policies,
                tenant_default,
                approval,
                preload_budget,
            },
        )
}

/// The rules that bound `server` (picking it, or bounding it only), per policy.
fn picking<'c>(case: &'c Case, server: &str) -> Vec<Vec<&'c RuleInput>> {
    case.policies
        .iter()
        .map(|p| {
            p.rules
                .iter()
                .filter(|r| r.servers.contains(server) || r.bounds_only.contains(server))
                .collect()
        })
        .collect()
}

/// The one access of a tool, restated: without policies the McpServer's classification;
/// under policies the strictest of the rules bounding the server, each classifying the tool by
/// its override or else as served, raised (never lowered) by the McpServer's override.
fn expected_access(case: &Case, server: &str, tool: &CatalogTool) -> Access {
    if case.policies.is_empty() {
        return tool.access;
    }
    let served = tool.served_access.unwrap_or(tool.access);
    let base = picking(case, server)
        .iter()
        .flatten()
        .map(|r| r.overrides.get(&tool.name).copied().unwrap_or(served))
        .max()
        .unwrap_or(served);
    match tool.served_access {
        Some(_) => base.max(tool.access),
        None => base,
    }
}

/// The tenant plane, restated: no policy → the default; otherwise, in every policy, some rule
/// picks the server, and every rule that bounds it permits the tool: not denied, allowed, and
/// within its ceiling.
fn tenant_permits(case: &Case, server: &str, tool: &CatalogTool) -> bool {
    if case.policies.is_empty() {
        return case.tenant_default == TenantDefault::Allow;
    }
    let access = expected_access(case, server, tool);
    case.policies
        .iter()
        .zip(picking(case, server))
        .all(|(p, rules)| {
            p.rules.iter().any(|r| r.servers.contains(server))
                && rules.iter().all(|r| {
                    PatternSet::new(&r.allow, &r.deny).permits(&tool.name)
                        && access <= r.max_access.unwrap_or(Access::Destructive)
                })
        })
}

/// The tools that pass every plane and do not wait for approval under pinning, restated
/// independently of `resolve`: (qualified name, server, tool).
fn expected_grants(case: &Case) -> Vec<(String, &ServerCase, &CatalogTool)> {
    let mut out = Vec::new();
    for s in &case.servers {
        let Some(catalog) = &s.catalog else { continue };
        if !(s.exists && s.ready) {
            continue;
        }
        let server_plane = PatternSet::new(&s.server_allow, &s.server_deny);
        let spec_plane = PatternSet::new(&s.allow, &s.deny);
        let prefix = s.prefix.as_deref().unwrap_or(&s.name);
        for tool in &catalog.tools {
            if server_plane.permits(&tool.name)
                && tenant_permits(case, &s.name, tool)
                && spec_plane.permits(&tool.name)
                && tool.awaiting_approval.is_none()
            {
                out.push((format!("{prefix}__{}", tool.name), s, tool));
            }
        }
    }
    out
}

fn check_against_the_planes(case: &Case) -> Result<(), TestCaseError> {
    let res = resolve(&case.input());
    let expected = expected_grants(case);
    let mut by_name: BTreeMap<&str, Vec<ToolRef>> = BTreeMap::new();
    for (qualified, s, tool) in &expected {
        by_name.entry(qualified).or_default().push(ToolRef {
            server: s.name.clone(),
            tool: tool.name.clone(),
        });
    }
    let collisions: Vec<Collision> = by_name
        .into_iter()
        .filter(|(_, tools)| tools.len() > 1)
        .map(|(name, mut tools)| {
            tools.sort();
            Collision {
                qualified_name: name.to_string(),
                tools,
            }
        })
        .collect();
    prop_assert_eq!(&res.collisions, &collisions);
    // Neither tool of a collision is published, from any entry of its server.
    let colliding: std::collections::BTreeSet<(&str, &str)> = collisions
        .iter()
        .flat_map(|c| &c.tools)
        .map(|t| (t.server.as_str(), t.tool.as_str()))
        .collect();
    let expected: Vec<_> = expected
        .into_iter()
        .filter(|(_, s, tool)| !colliding.contains(&(s.name.as_str(), tool.name.as_str())))
        .collect();
    let doc = &res.document;
    prop_assert_eq!(doc.tool_count(), expected.len());
    for (qualified, s, tool) in &expected {
        let (server, g) = doc.find(qualified).expect("granted");
        prop_assert_eq!(&server.name, &s.name);
        prop_assert_eq!(&g.name, &tool.name);
        prop_assert_eq!(g.access, expected_access(case, &s.name, tool));
        prop_assert_eq!(g.idempotent, tool.idempotent);
        prop_assert_eq!(&g.definition_digest, &tool.definition_digest);
    }
    Ok(())
}

/// Prefixes that make qualified names collide often: `a` + `_b` and `a_` + `b`, or one twice.
fn colliding_prefixes() -> impl Strategy<Value = Vec<&'static str>> {
    prop::collection::vec(prop_oneof![Just("a"), Just("a_")], 3)
}

/// The case with those prefixes, open allow lists and no policy, so that many tools pass.
fn colliding(mut case: Case, prefixes: Vec<&'static str>) -> Case {
    for (s, p) in case.servers.iter_mut().zip(prefixes) {
        s.prefix = Some(p.to_string());
        s.allow.clear();
        s.server_allow.clear();
    }
    case.policies.clear();
    case.tenant_default = TenantDefault::Allow;
    case
}

fn granted_tool<'r>(res: &'r Resolution, server: &str, tool: &str) -> Option<&'r GrantedTool> {
    res.document
        .servers
        .iter()
        .find(|s| s.name == server)?
        .tools
        .iter()
        .find(|t| t.name == tool)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// A tool is granted exactly when every plane lets it through: the result is a subset of
    /// each plane, and nothing that passes them all is lost.
    #[test]
    fn granted_exactly_when_every_plane_permits(case in case()) {
        check_against_the_planes(&case)?;
    }

    /// The same with prefixes that make qualified names collide often (`a` + `_b` and `a_` +
    /// `b`, or one prefix twice) and open allow lists, so that many tools pass: a collision is
    /// reported exactly when two tools that pass every plane share a qualified name, and then
    /// neither is published while everything else is.
    #[test]
    fn collisions_are_exactly_the_shared_qualified_names(
        case in case(),
        prefixes in colliding_prefixes(),
    ) {
        check_against_the_planes(&colliding(case, prefixes))?;
    }

    /// Withholding a collision is exactly what the AgentSpec denying both tools (on every entry
    /// of their servers) would publish, with the same counts.
    #[test]
    fn a_collision_is_withheld_as_if_the_agent_spec_denied_it(
        case in case(),
        prefixes in colliding_prefixes(),
    ) {
        let case = colliding(case, prefixes);
        let res = resolve(&case.input());
        let mut denied = case.clone();
        for t in res.collisions.iter().flat_map(|c| &c.tools) {
            for s in denied.servers.iter_mut().filter(|s| s.name == t.server) {
                s.deny.push(t.tool.clone());
            }
        }
        let narrower = resolve(&denied.input());
        prop_assert!(narrower.collisions.is_empty());
        prop_assert_eq!(&res.document, &narrower.document);
        prop_assert_eq!(&res.servers, &narrower.servers);
    }

    /// Whatever collides, the published document never holds one qualified name twice, and its
    /// counts still add up to the catalogue.
    #[test]
    fn no_published_document_has_two_tools_of_one_qualified_name(
        case in case(),
        prefixes in colliding_prefixes(),
    ) {
        for case in [colliding(case.clone(), prefixes), case] {
            let res = resolve(&case.input());
            let mut seen = std::collections::BTreeSet::new();
            for server in &res.document.servers {
                for t in &server.tools {
                    prop_assert!(
                        seen.insert(t.qualified_name.clone()),
                        "{} published twice",
                        t.qualified_name
                    );
                }
            }
            prop_assert_eq!(res.ready && !res.collisions.is_empty(), false);
            for (o, g) in res.servers.iter().zip(&res.document.servers) {
                prop_assert_eq!(o.granted_tools as usize, g.tools.len());
                prop_assert_eq!(o.deferred, g.deferred);
            }
        }
    }

    /// A tool matched by a deny pattern of any plane that applies to its server is never
    /// granted, whatever any allow says.
    #[test]
    fn deny_always_wins(case in case()) {
        let res = resolve(&case.input());
        for s in &case.servers {
            let Some(catalog) = &s.catalog else { continue };
            let mut denies: Vec<&String> = s.deny.iter().chain(&s.server_deny).collect();
            for rules in picking(&case, &s.name) {
                denies.extend(rules.iter().flat_map(|r| &r.deny));
            }
            let denied = PatternSet::new(Vec::<String>::new(), denies);
            for tool in &catalog.tools {
                if denied.denies(&tool.name) {
                    prop_assert!(granted_tool(&res, &s.name, &tool.name).is_none());
                }
            }
        }
    }

    /// Approval is required exactly by the approval level, a requireApproval name, or a rule
    /// picking the server with a low enough requireApprovalFor.
    #[test]
    fn approval_follows_every_source(case in case()) {
        let res = resolve(&case.input());
        let doc = &res.document;
        for server in &doc.servers {
            let s = case.servers.iter().find(|s| s.name == server.name).unwrap();
            for g in &server.tools {
                // g.access is the one access (checked against expected_access above).
                let by_level = match case.approval {
                    Approval::None => false,
                    Approval::Destructive => g.access == Access::Destructive,
                    Approval::Writes => g.access != Access::Read,
                    Approval::All => true,
                };
                let by_name = s.require_approval.contains(&g.name)
                    || s.server_require_approval.contains(&g.name);
                let by_policy = picking(&case, &s.name).iter().flatten().any(|r| {
                    r.require_approval_for.is_some_and(|a| a <= g.access)
                });
                prop_assert_eq!(g.requires_approval, by_level || by_name || by_policy);
            }
        }
    }

    /// The order of servers, patterns, policies, rules and catalogue tools never shows.
    #[test]
    fn order_never_changes_the_result(case in case(), seed in any::<u64>()) {
        let one = resolve(&case.input());
        let permuted = case.permuted(seed);
        let two = resolve(&permuted.input());
        prop_assert_eq!(
            one.document.digest(),
            two.document.digest()
        );
        prop_assert_eq!(one, two);
    }

    /// Resolving twice gives the same document, digest and findings.
    #[test]
    fn resolving_twice_gives_the_same_digest(case in case()) {
        let input = case.input();
        let one = resolve(&input);
        let two = resolve(&input);
        prop_assert_eq!(
            one.document.digest(),
            two.document.digest()
        );
        prop_assert_eq!(one, two);
    }

    /// Counts add up, deferral follows the budget, readiness follows the blocking findings,
    /// and the call-time check agrees with the document.
    #[test]
    fn status_is_consistent(case in case()) {
        let res = resolve(&case.input());
        for o in &res.servers {
            let s = case.servers.iter().find(|s| s.name == o.name).unwrap();
            prop_assert_eq!(o.available, s.exists && s.ready && s.catalog.is_some());
            if o.available {
                let total = s.catalog.as_ref().unwrap().tools.len() as u32;
                prop_assert_eq!(
                    o.granted_tools + o.withheld_by_server + o.withheld_by_policy
                        + o.withheld_by_spec + o.awaiting_approval,
                    total
                );
            } else {
                prop_assert_eq!(o.granted_tools, 0);
            }
            prop_assert_eq!(o.deferred, o.granted_schema_bytes > case.preload_budget);
        }
        // Available, or optional: either way it does not hold readiness back.
        let excused = |s: &ServerCase| (s.exists && s.ready && s.catalog.is_some())
            || (s.exists && s.optional);
        let required_missing = !case.servers.iter().all(excused);
        prop_assert_eq!(res.ready, res.resolved() && !required_missing);
        {
            let doc = &res.document;
            // Every published name is <prefix>__<name>: what the sidecar checks, and what
            // keeps names without `__` free for its discovery tools.
            prop_assert_eq!(doc.naming_problem(), None);
            let mut seen = std::collections::BTreeSet::new();
            for server in &doc.servers {
                for t in &server.tools {
                    prop_assert!(seen.insert(t.qualified_name.clone()));
                    prop_assert_eq!(
                        crate::grants::permits(doc, &t.qualified_name),
                        Some(t)
                    );
                }
            }
        }
    }
}

// Nothing a tenant adds widens its grants under a policy: a label (to a rule, one more server
// it picks), a rule of the platform's that picks only servers the policy already picks, or an
// override on its McpServer. "Widens" is any of: a tool granted that was not, a tool that
// needed approval and no longer does, an access that went down.

/// Per (server, tool): the granted access and whether a call needs approval.
fn what_is_granted(case: &Case) -> BTreeMap<(String, String), (Access, bool)> {
    let res = resolve(&case.input());
    let doc = res.document;
    doc.servers
        .iter()
        .flat_map(|s| {
            s.tools.iter().map(|t| {
                (
                    (s.name.clone(), t.name.clone()),
                    (t.access, t.requires_approval),
                )
            })
        })
        .collect()
}

fn never_wider(before: &Case, after: &Case) -> Result<(), TestCaseError> {
    let before = what_is_granted(before);
    for (tool, (access, approval)) in what_is_granted(after) {
        let Some((was_access, was_approval)) = before.get(&tool) else {
            return Err(TestCaseError::fail(format!("{tool:?} is newly granted")));
        };
        prop_assert!(
            access >= *was_access,
            "{:?}: access went down to {}",
            tool,
            access
        );
        prop_assert!(
            approval || !was_approval,
            "{:?} no longer needs approval",
            tool
        );
    }
    Ok(())
}

/// The case with every server under its own name as prefix, so no two tools collide.
fn without_prefixes(mut case: Case) -> Case {
    for s in &mut case.servers {
        s.prefix = None;
    }
    case
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// One more rule picks a server (the tenant labelled it, or named it so): if the policy
    /// already picks the server, that rule now bounds it too; a rule that can only bound it
    /// (an unreadable selector) never lets it in. Either way nothing widens.
    #[test]
    fn a_rule_match_never_widens(
        case in case().prop_map(without_prefixes),
        policy in any::<prop::sample::Index>(),
        rule in any::<prop::sample::Index>(),
        server in any::<prop::sample::Index>(),
    ) {
        prop_assume!(!case.policies.is_empty());
        let mut after = case.clone();
        let p = &mut after.policies[policy.index(case.policies.len())];
        prop_assume!(!p.rules.is_empty());
        let name = case.servers[server.index(case.servers.len())].name.clone();
        let already_picked = p.rules.iter().any(|r| r.servers.contains(&name));
        let r = rule.index(p.rules.len());
        if already_picked {
            p.rules[r].servers.insert(name);
        } else {
            p.rules[r].bounds_only.insert(name);
        }
        never_wider(&case, &after)?;
    }

    /// The platform adds a rule that picks only servers the policy already picks: a bound,
    /// never a grant.
    #[test]
    fn a_rule_for_servers_already_picked_never_widens(
        case in case().prop_map(without_prefixes),
        policy in any::<prop::sample::Index>(),
        extra in rule(),
    ) {
        prop_assume!(!case.policies.is_empty());
        let mut after = case.clone();
        let p = &mut after.policies[policy.index(case.policies.len())];
        let picked: std::collections::BTreeSet<String> =
            p.rules.iter().flat_map(|r| r.servers.iter().cloned()).collect();
        let mut extra = extra;
        extra.servers.retain(|s| picked.contains(s));
        extra.position = p.rules.len();
        p.rules.push(extra);
        never_wider(&case, &after)?;
    }

    /// The tenant overrides a tool's classification on its McpServer, to anything: under a
    /// policy, it can only tighten.
    #[test]
    fn a_tenant_override_never_widens_under_a_policy(
        case in case().prop_map(without_prefixes),
        server in any::<prop::sample::Index>(),
        tool in any::<prop::sample::Index>(),
        overridden in access(),
    ) {
        prop_assume!(!case.policies.is_empty());
        let mut after = case.clone();
        let s = server.index(case.servers.len());
        let Some(catalog) = after.servers[s].catalog.as_mut() else { return Ok(()) };
        prop_assume!(!catalog.tools.is_empty());
        let i = tool.index(catalog.tools.len());
        let t = &mut catalog.tools[i];
        prop_assume!(t.served_access.is_none());
        t.served_access = Some(t.access);
        t.access = overridden;
        never_wider(&case, &after)?;
    }

    /// And without a policy (tenant default allow) an override is the McpServer owner's to
    /// make, down as well as up: what it says is what is published.
    #[test]
    fn without_a_policy_the_override_is_the_access(case in case().prop_map(without_prefixes)) {
        let mut case = case;
        case.policies.clear();
        case.tenant_default = TenantDefault::Allow;
        for ((server, tool), (access, _)) in what_is_granted(&case) {
            let s = case.servers.iter().find(|s| s.name == server).unwrap();
            let t = s.catalog.as_ref().unwrap().tools.iter().find(|t| t.name == tool).unwrap();
            prop_assert_eq!(access, t.access);
        }
    }
}
