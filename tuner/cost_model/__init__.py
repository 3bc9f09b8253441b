"""Cost models that rank candidate configs: `CostModel` is the interface; `XgbCostModel`
("xgb") learns from measurements, `RandomModel` ("random") is the null one."""

from akg.tuner.cost_model.cost_model import COST_MODELS, CostModel, make_cost_model, register_cost_model
from akg.tuner.cost_model.random_model import RandomModel
from akg.tuner.cost_model.xgb_model import XgbCostModel

__all__ = ["COST_MODELS", "CostModel", "RandomModel", "XgbCostModel", "make_cost_model", "register_cost_model"]
