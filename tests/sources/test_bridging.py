"""The second hop's bridges (services/bridging.py): which names of the first passages are looked up."""

from __future__ import annotations

from inferd.services.bridging import bridges_of, joined
from inferd.services.retrieval import Passage


def passage(chunk_id: int, text: str, heading: str | None = None) -> Passage:
    return Passage(1, "doc.md", chunk_id, chunk_id, text, heading, None, None, 0.0)


POLICY = passage(1, "Cash advances are approved by the Cost Centre Controller responsible for the traveller's "
                    "department. Advances are paid ten days before departure at Skyfold Instruments GmbH.",
                 "7. Cash advances")
TITLE = passage(2, "Skyfold Instruments GmbH travel policy. Skyfold Instruments GmbH employees book trips early.")
FOOTER = passage(3, "Questions about this policy go to Skyfold Instruments GmbH headquarters in Bremen.")


def test_the_name_the_closest_sentence_introduces_is_looked_up_with_what_is_asked_of_it() -> None:
    question = "What is the phone extension of the office that approves cash advances at Skyfold?"
    [bridge] = bridges_of(question, [POLICY, TITLE, FOOTER])
    # The company is in every passage (the document's subject, not a bridge); "Instruments GmbH"
    # is what is left of the question's own name.
    assert bridge.name == "Cost Centre Controller"
    assert bridge.query.startswith("Cost Centre Controller ") and "phone" in bridge.query and "extension" in bridge.query
    assert "cash" not in bridge.query.lower().split()  # the passage has it: nothing to ask of the bridge


def test_a_reference_in_parentheses_comes_first() -> None:
    recipe = passage(4, "Ingredients: 1.2 kg lamb neck; 3 onions; 600 ml dark lamb stock (recipe 7); 50 g butter.",
                     "Recipe 1: Saltmarsh lamb hotpot")
    bridges = bridges_of("How long is the stock of the Saltmarsh lamb hotpot simmered?", [recipe])
    assert bridges[0].name == "recipe 7" and bridges[0].query.startswith("recipe 7 ")


def test_nothing_to_bridge_when_no_sentence_shares_the_question() -> None:
    assert bridges_of("Which glove protects against hydrofluoric acid?", [POLICY, TITLE]) == []
    # A heading or a short label is no sentence: it names no bridge.
    label = passage(5, "Cost Centre Controller approves cash advances")
    assert bridges_of("Who approves cash advances?", [label]) == []


def test_joined_puts_new_passages_after_the_lead_and_drops_repeats() -> None:
    first = [passage(i, f"text {i}.") for i in (1, 2, 3)]
    second = [[passage(2, "text 2."), passage(9, "row 9.")], [passage(9, "row 9."), passage(8, "row 8.")]]
    assert [p.chunk_id for p in joined(first, second)] == [1, 2, 9, 8, 3]
    assert joined(first, []) == first


def test_a_code_is_a_value_not_a_bridge() -> None:
    mission = passage(6, "The secret launch code of the Pelican mission is AMBER-7731, kept in the Blue Room safe.")
    bridges = bridges_of("What is the launch code of the Pelican mission?", [mission])
    assert [bridge.name for bridge in bridges] == ["Blue Room"]
