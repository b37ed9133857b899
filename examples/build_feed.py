"""Write examples/feed.jsonl: a small, realistic feed that shows every behaviour of streamdedup.

    python examples/build_feed.py

The feed, in order:

1. a help article copied into three Confluence spaces (exact copies; their ACLs add up);
2. a travel policy uploaded as v2, v2-final and v2-final-signed (exact copies, one near-edited paragraph whose
   newer copy becomes canonical: a swap);
3. a serving guide that says float16 and a note that says float32 (near, but a different fact: fact_conflict);
4. a refund page that says 30 days and a support macro that says 14 days (fact_conflict);
5. a public pricing FAQ and a newer, finance-only near copy of it (acl_boundary);
6. a README and an older engineering wiki page with a near copy of its install paragraph (a near merge);
7. an ACL change, a replayed old event (ignored), and one malformed event (dead-lettered);
8. deletions: one of the three help copies, then the two newer policy uploads, so the v2 paragraph that had
   been superseded is elected canonical again.
"""

from __future__ import annotations

import json
from pathlib import Path

HELP = [
    "Reset your password",
    "If you forgot your password, open the sign-in page and choose Forgot password. Enter the email address "
    "you use for your account and we will send you a link that lets you choose a new password. The link works "
    "once and expires after one hour, so use it soon after it arrives. If the email does not arrive within a "
    "few minutes, check your spam folder and make sure the address you entered is the one on your account.",
    "For security reasons our support team can never see or change your password for you. If you still cannot "
    "sign in after resetting it, contact support from the help center and include the email address of your "
    "account and the time of your last successful sign-in, so that we can check the sign-in logs for you.",
]

POLICY_COMMON = [
    "Travel and Expense Policy v2",
    "Employees may book economy class for flights shorter than six hours and premium economy for longer "
    "flights. Bookings must be made through the company travel portal at least fourteen days before departure, "
    "unless the trip is urgent and approved by a director. Hotel stays are reimbursed up to the city rate "
    "published on the finance intranet, including taxes and breakfast.",
]
POLICY_EXPENSES = (
    "Expense reports must be submitted within the month in which the costs occurred, together with itemized "
    "receipts for every expense that is claimed. Reports that arrive late or without receipts are returned to "
    "the employee, who must {verb} and resubmit them before any reimbursement can be paid out by the finance "
    "team. Managers approve the reports of their direct reports and should check that every claimed expense "
    "was necessary for the business purpose of the trip and is supported by a receipt."
)
POLICY_SIGNED = "Approved by the Chief Financial Officer on 2 April 2024."

SERVING = (
    "To fit the model on a single accelerator, the serving stack loads the weights in {dtype} and keeps the "
    "key-value cache in the same precision. In our tests this changed answer quality by less than the "
    "run-to-run noise of the evaluation suite, while memory use stayed within the budget of the smallest "
    "instance type we deploy on. Quantization below this level is covered in a separate guide, because it "
    "needs calibration data and a careful look at the layers that are most sensitive to rounding."
)

REFUNDS = (
    "Customers can return any product bought in our online store and receive a full refund within {days} "
    "days of delivery. The item must be unused and in its original packaging, and the refund is paid to the "
    "original payment method within five business days after we receive the return. Shipping costs for "
    "returns are covered by us when the item arrived damaged or was not what you ordered."
)

INSTALL = (
    "Install the command-line client with the package manager of your platform, then {verb} the login command "
    "once to connect it to your workspace. The client stores its token in the system keychain and refreshes it "
    "on its own, so later commands work without asking for your password again. Behind a corporate proxy, set "
    "the proxy address in the configuration file before the first login so that the client can reach the "
    "workspace and download its plugins."
)

PRICING = (
    "Our team plan costs the same per seat whether you pay monthly or yearly, and every seat includes "
    "unlimited projects, single sign-on and priority email support. You can add or remove seats at any time "
    "from the billing page; changes apply from the next invoice and unused time is credited {how}. Volume "
    "pricing is available for larger organizations on request through the sales team."
)


def upsert(
    source_id: str, version: int, when: str, acl: list[str], chunks: list[str], **extra: object
) -> dict:
    """Return an upsert event with pre-chunked text."""
    return {
        "schema": "streamdedup.document/v1",
        "op": "upsert",
        "source_id": source_id,
        "version": version,
        "modified_at": when,
        "acl": acl,
        "chunks": chunks,
        **extra,
    }


def text_upsert(source_id: str, version: int, when: str, acl: list[str], text: str, **extra: object) -> dict:
    """Return an upsert event whose text streamdedup chunks by paragraph."""
    event = upsert(source_id, version, when, acl, [], **extra)
    del event["chunks"]
    event["text"] = text
    return event


def delete(source_id: str, version: int) -> dict:
    """Return a delete event."""
    return {"schema": "streamdedup.document/v1", "op": "delete", "source_id": source_id, "version": version}


def feed() -> list[dict | str]:
    """Return the example feed, events in order (a string is written as a raw, malformed line)."""
    help_sales = "\n\n".join(["RESET YOUR PASSWORD", HELP[1].replace(". ", ".  "), HELP[2]])
    policy_v2 = [*POLICY_COMMON, POLICY_EXPENSES.format(verb="correct")]
    policy_final = [*POLICY_COMMON, POLICY_EXPENSES.format(verb="amend")]
    return [
        text_upsert(
            "confluence:support/reset-password",
            1,
            "2024-01-10T09:00:00Z",
            ["support"],
            "\n\n".join(HELP),
            uri="https://wiki.example.com/support/reset-password",
            title="Reset your password",
        ),
        text_upsert(
            "confluence:sales/reset-password",
            1,
            "2024-01-12T14:30:00Z",
            ["sales"],
            help_sales,
            uri="https://wiki.example.com/sales/reset-password",
            title="Reset your password",
        ),
        text_upsert(
            "confluence:eng/reset-password",
            1,
            "2024-01-15T08:15:00Z",
            ["eng"],
            "\n\n".join(HELP),
            uri="https://wiki.example.com/eng/reset-password",
            title="Reset your password",
        ),
        upsert(
            "drive:policies/travel-policy-v2.pdf",
            1,
            "2024-03-01T10:00:00Z",
            ["*"],
            policy_v2,
            uri="https://drive.example.com/policies/travel-policy-v2.pdf",
            authority=1,
        ),
        upsert(
            "drive:policies/travel-policy-v2-final.pdf",
            1,
            "2024-03-15T10:00:00Z",
            ["*"],
            policy_final,
            uri="https://drive.example.com/policies/travel-policy-v2-final.pdf",
            authority=1,
        ),
        upsert(
            "drive:policies/travel-policy-v2-final-signed.pdf",
            1,
            "2024-04-02T16:45:00Z",
            ["*"],
            [*policy_final, POLICY_SIGNED],
            uri="https://drive.example.com/policies/travel-policy-v2-final-signed.pdf",
            authority=1,
        ),
        upsert(
            "docs:ml/serving-guide",
            1,
            "2024-02-20T11:00:00Z",
            ["eng"],
            [SERVING.format(dtype="float16")],
            uri="https://docs.example.com/ml/serving-guide",
            authority=1,
        ),
        upsert(
            "wiki:ml/serving-notes",
            1,
            "2024-02-22T17:20:00Z",
            ["eng"],
            [SERVING.format(dtype="float32")],
            uri="https://wiki.example.com/ml/serving-notes",
        ),
        upsert(
            "web:help/refunds",
            1,
            "2024-01-05T12:00:00Z",
            ["*"],
            [REFUNDS.format(days=30)],
            uri="https://www.example.com/help/refunds",
            authority=2,
        ),
        upsert(
            "zendesk:macros/refund-reply",
            1,
            "2024-03-28T09:40:00Z",
            ["support"],
            [REFUNDS.format(days=14)],
            uri="https://support.example.com/macros/refund-reply",
        ),
        upsert(
            "web:public/pricing-faq",
            1,
            "2024-02-01T08:00:00Z",
            ["*"],
            [PRICING.format(how="automatically")],
            uri="https://www.example.com/pricing/faq",
        ),
        upsert(
            "confluence:finance/pricing-faq",
            1,
            "2024-05-10T15:00:00Z",
            ["finance"],
            [PRICING.format(how="proportionally")],
            uri="https://wiki.example.com/finance/pricing-faq",
        ),
        upsert(
            "github:acme/cli/README.md",
            1,
            "2024-04-11T10:00:00Z",
            ["*"],
            [INSTALL.format(verb="run")],
            uri="https://github.example.com/acme/cli/blob/main/README.md",
            authority=1,
        ),
        upsert(
            "confluence:eng/cli-setup",
            1,
            "2024-02-02T13:00:00Z",
            ["eng"],
            [INSTALL.format(verb="execute")],
            uri="https://wiki.example.com/eng/cli-setup",
        ),
        {
            "schema": "streamdedup.document/v1",
            "op": "acl",
            "source_id": "confluence:eng/reset-password",
            "version": 2,
            "acl": ["eng", "contractors"],
        },
        upsert(
            "drive:policies/travel-policy-v2.pdf",
            1,
            "2024-03-01T10:00:00Z",
            ["*"],
            policy_v2,
            uri="https://drive.example.com/policies/travel-policy-v2.pdf",
            authority=1,
        ),
        '{"schema": "streamdedup.document/v1", "op": "upsert", "source_id": "broken:export", "version": 1, '
        '"acl": ["*"], "text": "an upsert without modified_at"}',
        delete("confluence:sales/reset-password", 2),
        delete("drive:policies/travel-policy-v2-final-signed.pdf", 2),
        delete("drive:policies/travel-policy-v2-final.pdf", 2),
    ]


def main() -> None:
    """Write the feed next to this script."""
    path = Path(__file__).with_name("feed.jsonl")
    lines = [item if isinstance(item, str) else json.dumps(item, ensure_ascii=False) for item in feed()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {len(lines)} events to {path}")


if __name__ == "__main__":
    main()
