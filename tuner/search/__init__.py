"""Search strategies: which configs to measure next. `SearchStrategy` is the interface;
`EvolutionarySearch` ("evolutionary") is model-guided, `RandomSearch` ("random") is not."""

from akg.tuner.search.evolutionary import EvolutionarySearch
from akg.tuner.search.random_search import RandomSearch
from akg.tuner.search.search import SEARCH_STRATEGIES, SearchStrategy, make_search, register_search

__all__ = ["EvolutionarySearch", "RandomSearch", "SEARCH_STRATEGIES", "SearchStrategy", "make_search",
           "register_search"]
