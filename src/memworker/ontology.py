"""The predicate vocabulary: the default list of predicates an extract claim may use.

A claim's predicate is chosen, not written (ARCHITECTURE decision 8): the dynamic schema makes it
an enum of the request's vocabulary. A store sends the predicates it uses (the episode's optional
`predicates`); without them the vocabulary is `PREDICATES` (every predicate the corpus generator
can emit: its domains' attributes and its behaviours' own predicates) plus the predicates of the
request's existing facts that carry one. A fact whose relation has no predicate in the
vocabulary cannot be extracted under that request: the store adds the predicate to `predicates`
(the grader compares predicate *families*, so a close predicate of the same family still counts).
`tests/test_ontology.py` keeps this list equal to what the generator emits.
"""

from __future__ import annotations

from typing import Any

#: predicates that the corpus behaviours write themselves (not a domain attribute)
BEHAVIOUR_PREDICATES = ("completed", "did_with", "has_account", "likes", "plans_to",
                        "relationship")
#: the default vocabulary (sorted)
PREDICATES: tuple[str, ...] = (
    "airline_pref", "allergic_to", "attends", "attends_class", "bought_from", "builds_docs_with",
    "builds_with_toolchain", "ci_system", "collects", "communication_pref", "commutes_by",
    "completed", "coordinates", "deploys_to", "destination", "dev_database_port",
    "dev_server_port", "did_with", "diet", "does_chore", "dog_walker", "donates_to", "drives",
    "eats", "enrolled_in", "equipment", "favourite_cuisine", "favourite_destination",
    "focus_time", "formatter", "garage", "go_to_restaurant", "goes_to_gym", "grocery_delivery",
    "has_account", "has_appointment", "has_deadline", "has_event", "has_interview", "has_meeting",
    "has_trip", "hobby", "home_airport", "home_type", "host", "hosts_on", "installs_with",
    "invoices_with", "job_title", "leads_team", "learning", "likes", "likes_toy", "linter",
    "lives_in", "location", "maintains", "member_of", "morning_routine", "name",
    "needs_help_with", "on_team", "orders", "owns_module", "package_manager", "paints_with",
    "pays_by", "pet_insurance", "phone", "plans_to", "plays", "plays_in", "plays_position",
    "practises", "prefers_contact", "prefers_format", "prefers_language", "relationship",
    "requires_go", "restaurant", "reviews", "rides", "runs_business", "runs_locally_with",
    "sells_at", "side_project", "sitter", "speaks", "start_location", "street", "studies",
    "study_tool", "subscribes_to", "targets_runtime", "test_runner", "tests_pass_on", "topic",
    "tracks_sleep_with", "travel_insurance", "uses_aid", "uses_calendar", "uses_editor",
    "uses_service", "uses_shell", "uses_tool", "venue", "vet", "volunteers_at", "works_at",
    "works_from",
)


def vocabulary(inputs: dict[str, Any]) -> list[str]:
    """The predicates an extract claim of this request may use: the episode's `predicates` when
    given, else `PREDICATES` plus the existing facts' predicates (first occurrence order)."""
    if "predicates" in inputs:
        return list(inputs["predicates"])
    extra = [f["predicate"] for f in inputs["existing_facts"] if f.get("predicate")]
    return list(dict.fromkeys([*PREDICATES, *extra]))
