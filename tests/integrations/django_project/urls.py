from django.urls import path

from tests.integrations.django_project.shop import views

urlpatterns = [
    path("orders/", views.create_order),
    path("tasks/multiply/", views.enqueue_task),
]
