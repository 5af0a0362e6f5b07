from __future__ import annotations

from django.db import models


class Order(models.Model):
    item: models.CharField[str, str] = models.CharField(max_length=100)
    processed: models.BooleanField[bool, bool] = models.BooleanField(default=False)

    class Meta:
        app_label = "shop"
