from django.urls import path
from shop import views

urlpatterns = [
    path("orders/", views.create_order),
    path("jobs/<uuid:job_id>/", views.show_job),
    path("tasks/<str:result_id>/", views.show_task),
]
