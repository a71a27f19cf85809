import torch
import torch.nn as nn


class Model2(nn.Module):
    def forward(self, x):
        return x.mean(dim=-1)
