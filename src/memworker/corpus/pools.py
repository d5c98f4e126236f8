"""Shared name pools, and the split of names and families by hash.

People's and pets' names are partitioned between splits by a hash of the name, so a test family
never reuses a name that a training family saw (values such as cities are shared: they are the
facts' content, not identities). Month and weekday names are left out: they would read as time
expressions ("April", "June").
"""

from __future__ import annotations

from functools import cache

from memworker.hashing import sha256_parts

SPLITS = ("train", "val", "test")
SPLIT_SHARES = {"train": 0.70, "val": 0.15, "test": 0.15}

FEMALE = (
    "Ada", "Aisha", "Alba", "Alice", "Amara", "Amelia", "Ana", "Anika", "Astrid", "Beatriz",
    "Bianca", "Camila", "Carmen", "Chiara", "Clara", "Dalia", "Daniela", "Eleni", "Elif",
    "Elena", "Eliza", "Emily", "Emma", "Esme", "Eva", "Farah", "Fatima", "Freya", "Gabriela",
    "Grace", "Greta", "Hana", "Hannah", "Helena", "Ines", "Ingrid", "Irene", "Isabel", "Isla",
    "Jana", "Jasmine", "Julia", "Kaia", "Kamila", "Keiko", "Lara", "Layla", "Leah", "Leila",
    "Lena", "Lina", "Lucia", "Luisa", "Lydia", "Maya", "Marta", "Mei", "Mila", "Mira", "Nadia",
    "Naomi", "Nina", "Noor", "Olga", "Olivia", "Paula", "Priya", "Rosa", "Ruth", "Sabine",
    "Sara", "Selin", "Sofia", "Sonia", "Tamar", "Tara", "Teresa", "Uma", "Valentina", "Vera",
    "Wanda", "Yara", "Yuki", "Zara", "Zoe", "Petra", "Rania", "Iris", "Matilda", "Nora",
    "Aurora", "Celia", "Dora", "Edith", "Flora", "Gloria", "Hilda", "Ivana", "Joana", "Kira",
    "Lotte", "Magda", "Nell", "Orla", "Pia", "Rhea", "Siobhan", "Thea", "Ursula", "Vivian",
    "Wren", "Ximena", "Yasmin", "Zuzana", "Agnes", "Bronwyn", "Carla", "Delia",
)
MALE = (
    "Aaron", "Adrian", "Ahmed", "Alex", "Amir", "Andre", "Anton", "Arjun", "Ben", "Bruno",
    "Carlos", "Cedric", "Daniel", "Dario", "David", "Diego", "Dmitri", "Eli", "Elias", "Emil",
    "Ethan", "Felix", "Finn", "Gabriel", "George", "Hamza", "Hassan", "Hugo", "Ian", "Ibrahim",
    "Igor", "Isaac", "Ivan", "Jack", "Jakob", "James", "Jonas", "Jorge", "Joseph", "Kai",
    "Karim", "Kenji", "Leo", "Liam", "Luca", "Lucas", "Malik", "Marco", "Mateo", "Max",
    "Miguel", "Milan", "Nathan", "Nico", "Noah", "Omar", "Oscar", "Pablo", "Paolo", "Pedro",
    "Rafael", "Ravi", "Rohan", "Samuel", "Santiago", "Sebastian", "Simon", "Stefan", "Tariq",
    "Theo", "Tobias", "Tom", "Victor", "Viktor", "Wei", "Yusuf", "Zane", "Anders", "Bjorn",
    "Callum", "Dev", "Eamon", "Fraser", "Gus", "Hiro", "Idris", "Jonah", "Kofi", "Lars",
    "Magnus", "Neil", "Otto", "Pascal", "Quentin", "Rory", "Silas", "Tobin", "Ulrich", "Vince",
    "Wes", "Xavier", "Yann", "Zoltan", "Abel", "Basil", "Cyrus", "Dominic", "Emeka", "Florin",
    "Gideon", "Harvey", "Ishaan", "Jasper", "Kwame", "Lorenzo", "Mehmet",
)
PETS = (
    "Biscuit", "Pepper", "Mochi", "Luna", "Ziggy", "Olive", "Nacho", "Pickles", "Maple",
    "Rusty", "Clover", "Tofu", "Peanut", "Waffles", "Juniper", "Pixel", "Noodle", "Bean",
    "Scout", "Cinnamon", "Hazel", "Marble", "Otis", "Pumpkin", "Sprout", "Tilly", "Bramble",
    "Domino", "Fennel", "Ginger", "Hopper", "Kiwi", "Lentil", "Muffin", "Nutmeg", "Pebble",
    "Quincy", "Radish", "Saffron", "Thistle", "Truffle", "Velvet", "Whisky", "Yoyo", "Zorro",
    "Button", "Cocoa", "Dumpling", "Echo", "Fig", "Gizmo",
)


def unit_hash(*parts: str) -> float:
    """A number in [0, 1) from sha256 of the parts (stable across machines and runs)."""
    return int.from_bytes(sha256_parts(*parts)[:8], "big") / 2**64


def split_of_name(name: str) -> str:
    h = unit_hash("name-split", name)
    if h < SPLIT_SHARES["train"]:
        return "train"
    return "val" if h < SPLIT_SHARES["train"] + SPLIT_SHARES["val"] else "test"


@cache
def names_for_split(split: str) -> dict[str, tuple[str, ...]]:
    """The female, male and pet names that belong to `split` (sorted, so order is stable)."""
    return {
        "female": tuple(sorted(n for n in FEMALE if split_of_name(n) == split)),
        "male": tuple(sorted(n for n in MALE if split_of_name(n) == split)),
        "pet": tuple(sorted(n for n in PETS if split_of_name(n) == split)),
    }


def assign_family_splits(family_ids: list[str], group_of: dict[str, str]) -> dict[str, str]:
    """Split families ~70/15/15 by sha256 of the family id, stratified by group (domain), so that
    every domain has families in every split. Decided before anything is generated."""
    out: dict[str, str] = {}
    groups: dict[str, list[str]] = {}
    for fid in family_ids:
        groups.setdefault(group_of[fid], []).append(fid)
    for group in sorted(groups):
        ranked = sorted(groups[group], key=lambda f: (unit_hash("family-split", f), f))
        n = len(ranked)
        n_test = max(1, round(n * SPLIT_SHARES["test"])) if n >= 3 else 0
        n_val = max(1, round(n * SPLIT_SHARES["val"])) if n >= 3 else 0
        for i, fid in enumerate(ranked):
            out[fid] = "test" if i < n_test else "val" if i < n_test + n_val else "train"
    return out
