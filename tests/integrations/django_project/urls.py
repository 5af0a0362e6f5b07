from django.urls import path

from tests.integrations.django_project.shop import injected, views

urlpatterns = [
    path("orders/", views.create_order),
    path("greet/", injected.greet_view),
    path("tasks/multiply/", views.enqueue_task),
]
