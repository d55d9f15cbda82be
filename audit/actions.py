"""Every action the trail records, by its stable dotted name, and what it means."""

from __future__ import annotations

ACTIONS: dict[str, str] = {
    "account.create": "An account was created.",
    "account.update": "An operator changed an account's settings.",
    "account.billing": "The account's bandwidth price or markup changed.",
    "account.governance": "The account's time zone or budget alert percents changed.",
    "account.directory": "The account's directory roles (directory group -> role) changed.",
    "account.suspend": "An operator suspended the account: every key refused (LM-1004).",
    "account.resume": "An operator resumed the account.",
    "account.delete": "An operator deleted the account.",
    "member.add": "A person was added to the account with a role.",
    "member.role": "A member's role changed.",
    "member.update": "An operator changed a membership's person (and role).",
    "member.remove": "A member was removed from the account.",
    "token.create": "A tenant API token was issued to a member.",
    "token.revoke": "A member's tenant API token was revoked.",
    "token.rotate": "A tenant API token got a new secret; the old one works until its grace "
    "period ends (recorded by prefix, never the token).",
    "token.restore": "An operator cleared a token's revocation.",
    "token.delete": "An operator deleted a tenant API token.",
    "scim.token.create": "An owner created the account's SCIM token (shown once, never recorded).",
    "scim.token.rotate": "An owner rotated the SCIM token; the old one works until its grace "
    "period ends (recorded by prefix, never the token).",
    "scim.user.create": "The directory (SCIM) provisioned a person into the account.",
    "scim.user.update": "The directory changed a provisioned person's userName, email or "
    "externalId.",
    "scim.user.deactivate": "The directory deactivated a person: their membership ended, their "
    "sessions ended and their tenant API tokens were revoked.",
    "scim.user.activate": "The directory activated a person again (a role from their groups).",
    "scim.user.delete": "The directory deleted a person from the account (sessions ended, "
    "tokens revoked; the user deactivated when no other account has them).",
    "scim.group.create": "The directory pushed a group to the account.",
    "scim.group.update": "A directory group's name or members changed (roles follow).",
    "scim.group.delete": "The directory removed a group (its members' roles follow).",
    "group.create": "A group was created.",
    "group.update": "A group's name, budget, budget period, limits or cache settings changed.",
    "group.delete": "An operator deleted a group.",
    "key.create": "A virtual key was created (its secret shown once, never recorded).",
    "key.update": "A virtual key's name, models, budget, budget period, limits, expiry or cache "
    "settings changed.",
    "key.rotate": "A virtual key got a new secret (same id, models, limits, budget); the old "
    "one works until its grace period ends (recorded by prefix, never the secret).",
    "key.revoke": "A virtual key was revoked.",
    "key.delete": "An operator deleted a virtual key.",
    "key.access_groups": "The model access groups assigned to a virtual key changed (they add "
    "to the models it may call).",
    "group.access_groups": "The model access groups bounding a group's keys changed.",
    "access_group.create": "A model access group (named model names and patterns) was created.",
    "access_group.update": "A model access group's name, description or entries changed: live "
    "for every key it is assigned to.",
    "access_group.delete": "A model access group was deleted with its assignments.",
    "tag_budget.create": "A request tag got a budget per period (LM-4001 naming the tag once "
    "it is used).",
    "tag_budget.update": "A tag budget's amount or period changed.",
    "tag_budget.delete": "A tag's budget was removed (its spend rows stay).",
    "sso.settings": "The account's single sign-on provider or its rules (just-in-time domains "
    "and role, groups claim, enabled, password sign-in) changed; a client secret by the fact.",
    "sso.link": "A person's identity at an OpenID provider (issuer and subject) was linked to a "
    "user: on their first sign-in, by SCIM's externalId, or by the member themselves.",
    "sso.unlink": "An operator removed an identity link: that identity's next sign-in starts "
    "afresh.",
    "sso.operator": "An operator signing in through the admin's OpenID provider was made staff "
    "and superuser.",
    "cache.purge": "Every cached answer of the account was dropped (the response cache).",
    "pool.fallback.enable": "Platform fallback turned on for a team key pool: consent to pay "
    "platform prices when the team's keys cannot serve.",
    "pool.fallback.disable": "Platform fallback turned off (or a pool created with it off).",
    "pool.delete": "A team key pool was removed with its keys.",
    "teamkey.add": "A team provider key was added (recorded by label and last 4).",
    "teamkey.delete": "A team provider key was removed.",
    "teamkey.reseal": "Team keys were re-sealed under the newest master key.",
    "wallet.opening": "A wallet opened with a balance.",
    "wallet.topup": "A wallet was topped up.",
    "wallet.adjustment": "A wallet's balance was corrected.",
    "wallet.delete": "An operator deleted a wallet.",
    "profile.create": "A provider profile was created (operator-wide).",
    "profile.update": "A provider profile, its platform key (last 4) or its models changed.",
    "profile.delete": "A provider profile was deleted.",
    "platformkey.add": "A platform key was added to a profile (recorded by label and last 4).",
    "platformkey.update": "A platform key's weight, limits or state changed.",
    "platformkey.delete": "A platform key was removed from a profile.",
    "platformkey.failed": "The vendor refused a platform key (401 / 403): Tollgate took it out.",
    "alert_rule.create": "A tenant alert rule (budget percents or amount, or a wallet floor) "
    "was created.",
    "alert_rule.update": "A tenant alert rule's thresholds, recipients or state changed.",
    "alert_rule.delete": "A tenant alert rule was deleted.",
    "alert_webhook.create": "A tenant alert webhook was added (its signing secret shown once, "
    "never recorded).",
    "alert_webhook.update": "A tenant alert webhook's URL, description or state changed.",
    "alert_webhook.rotate": "A tenant alert webhook got a new signing secret (shown once).",
    "alert_webhook.delete": "A tenant alert webhook was removed.",
    "alert_webhook.test": "A test alert was queued for a tenant webhook.",
    "guardrail.create": "A guardrail was defined: the operator's (offered to every account) or "
    "an account's (a webhook's signing secret shown once, never recorded).",
    "guardrail.update": "A guardrail's phase, action, detectors, patterns, words, model, URL, "
    "deadline, fail mode or state changed.",
    "guardrail.delete": "A guardrail was deleted with its attachments.",
    "guardrail.rotate": "A webhook guardrail got a new signing secret (shown once).",
    "guardrail.attach": "A guardrail was attached to an account, a group or a key (by the "
    "operator or the tenant), or the operator took over the tenant's attachment.",
    "guardrail.detach": "A guardrail was detached from an account, a group or a key.",
}
